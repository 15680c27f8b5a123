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
		t.Logf("functions/%s %v may write (%s):", f.Dir, f.Groups, how)
		for _, action := range partitions.WriteActions {
			t.Logf("  %s %q", action, f.Writes[action])
		}
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
		granted := map[string]bool{}
		for _, g := range grants {
			if g.Resource != "Table" || !slices.Contains(partitions.WriteActions, g.Action) {
				continue
			}
			granted[g.Action] = true
			want := f.Writes[g.Action]
			got, err := leadingKeys(g.Condition)
			if err != nil {
				t.Errorf("%s: %s: %v; want the condition %s", role, g.Action, err, condition(want))
				continue
			}
			for _, w := range want {
				if !slices.ContainsFunc(got, func(p string) bool { return partitions.Covers(p, w) }) {
					t.Errorf("%s may not %s in %s, which functions/%s does; want %s", role, g.Action, w, f.Dir, condition(want))
				}
			}
			for _, p := range got {
				if !slices.ContainsFunc(want, func(w string) bool { return partitions.Covers(p, w) }) {
					t.Errorf("%s may %s in %s, which functions/%s never does; want %s", role, g.Action, p, f.Dir, condition(want))
				}
			}
		}
		for action, want := range f.Writes {
			if !granted[action] {
				t.Errorf("%s may not %s at all, which functions/%s does in %q", role, action, f.Dir, want)
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
