package partitions_test

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tally-hq/tally/internal/deploy"
	"github.com/tally-hq/tally/internal/lambdacheck"
	"github.com/tally-hq/tally/internal/partitions"
)

// writeActions are the table actions that write an item.
var writeActions = []string{"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}

// TestWriteConditions derives from the code the partitions each API
// function may write and checks that template.yaml lets each of its write
// actions name exactly those (dynamodb:LeadingKeys), so that a route that
// writes a partition its function's role does not list fails here, not in
// production. (infra's parity test holds the CDK stack to template.yaml.)
func TestWriteConditions(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the SSA form of every API function")
	}
	fns, err := partitions.Derive(filepath.Join("..", ".."), lambdacheck.BuildTags)
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := deploy.Load(filepath.Join("..", "..", "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fns {
		how := "traced to the builders of their keys"
		if f.Untraced != "" {
			how = "every partition its code names; untraced: " + f.Untraced
		}
		t.Logf("functions/%s %v may write %q (%s)", f.Dir, f.Groups, f.Writes, how)
		id := strings.ToUpper(f.Dir[:1]) + f.Dir[1:] + "Function"
		fn, err := tpl.Function(id)
		if err != nil {
			t.Fatal(err)
		}
		role, err := deploy.RoleOf(fn.Role)
		if err != nil {
			t.Fatal(err)
		}
		grants, _, err := tpl.RoleGrants(role)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range grants {
			if g.Resource != "Table" || !slices.Contains(writeActions, g.Action) {
				continue
			}
			got, err := leadingKeys(g.Condition)
			if err != nil {
				t.Errorf("%s: %s: %v; want the condition %s", role, g.Action, err, condition(f.Writes))
				continue
			}
			for _, want := range f.Writes {
				if !slices.ContainsFunc(got, func(p string) bool { return partitions.Covers(p, want) }) {
					t.Errorf("%s may not %s in %s, which functions/%s writes; want %s", role, g.Action, want, f.Dir, condition(f.Writes))
				}
			}
			for _, p := range got {
				if !slices.ContainsFunc(f.Writes, func(want string) bool { return partitions.Covers(p, want) }) {
					t.Errorf("%s may %s in %s, which functions/%s never writes; want %s", role, g.Action, p, f.Dir, condition(f.Writes))
				}
			}
		}
	}
}

// leadingKeys reads a grant's condition, which must be one
// ForAllValues:StringLike of dynamodb:LeadingKeys (ForAnyValue, or a
// condition on anything else, would not bound what the action names).
func leadingKeys(cond string) ([]string, error) {
	if cond == "" {
		return nil, errNoCondition
	}
	var c map[string]map[string][]string
	if err := json.Unmarshal([]byte(cond), &c); err != nil {
		return nil, err
	}
	like := c["ForAllValues:StringLike"]
	if len(c) != 1 || len(like) != 1 || like["dynamodb:LeadingKeys"] == nil {
		return nil, errNoCondition
	}
	return like["dynamodb:LeadingKeys"], nil
}

var errNoCondition = errors.New("no ForAllValues:StringLike dynamodb:LeadingKeys condition")

func condition(patterns []string) string {
	b, _ := json.Marshal(patterns)
	return "ForAllValues:StringLike dynamodb:LeadingKeys " + string(b)
}

// TestCovers checks how a template's pattern is held against a derived one:
// a prefix pattern covers the longer prefixes it starts, an exact key only
// what matches it.
func TestCovers(t *testing.T) {
	for _, c := range []struct {
		pattern, want string
		covers        bool
	}{
		{"BRD#*", "BRD#*", true},
		{"BRD#*", "BRD#x#*", true},
		{"BRD*", "BRD#*", true},
		{"BRD#x*", "BRD#*", false},
		{"BRD#?*", "BRD#*", false},
		{"CONFIG", "CONFIG", true},
		{"CONF*", "CONFIG", true},
		{"CONFIG", "CONFIG*", false},
		{"RATE#*", "CONFIG", false},
	} {
		if got := partitions.Covers(c.pattern, c.want); got != c.covers {
			t.Errorf("Covers(%q, %q) = %v, want %v", c.pattern, c.want, got, c.covers)
		}
	}
}
