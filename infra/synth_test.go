package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
)

// The tests synthesize the stack once, with placeholder function code (no
// arm64 build needed), into a temporary cloud assembly.

// repoRoot is the repository root, seen from this package's directory (go
// test runs in it).
const repoRoot = ".."

var (
	tmpRoot string // removed by TestMain

	synthOnce sync.Once
	synthed   *synthesis
	synthErr  error
)

// synthesis is the synthesized TallyStack.
type synthesis struct {
	template assertions.Template
	json     map[string]any // the CloudFormation template
	assembly string         // the cloud assembly's directory (staged assets)
}

func TestMain(m *testing.M) {
	var err error
	if tmpRoot, err = os.MkdirTemp("", "tally-infra-test"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	jsii.Close()
	os.RemoveAll(tmpRoot)
	os.Exit(code)
}

// tempDir is a fresh directory under tmpRoot (t.TempDir would be removed
// while the shared synthesis still points into it).
func tempDir(t *testing.T, name string) string {
	t.Helper()
	dir, err := os.MkdirTemp(tmpRoot, name)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// synth returns the stack synthesized with placeholder code and default
// props.
func synth(t *testing.T) *synthesis {
	t.Helper()
	synthOnce.Do(func() {
		code := tempDir(t, "code")
		if synthErr = WritePlaceholderCode(code); synthErr != nil {
			return
		}
		synthed, synthErr = synthesize(tempDir(t, "cdk.out"), &TallyStackProps{RepoRoot: repoRoot, PlaceholderCode: code})
	})
	if synthErr != nil {
		t.Fatalf("synth: %v", synthErr)
	}
	return synthed
}

// synthesize builds an app with one TallyStack and synthesizes it into
// outdir.
func synthesize(outdir string, props *TallyStackProps) (*synthesis, error) {
	root, err := filepath.Abs(props.RepoRoot)
	if err != nil {
		return nil, err
	}
	props.RepoRoot = root
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(outdir)})
	stack, err := NewTallyStack(app, "TallyStack", props)
	if err != nil {
		return nil, err
	}
	tmpl := assertions.Template_FromStack(stack, nil)
	asm := app.Synth(nil)
	return &synthesis{template: tmpl, json: *tmpl.ToJSON(), assembly: *asm.Directory()}, nil
}

// resources returns the template's resources of type typ by logical id.
func (s *synthesis) resources(typ string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range s.json["Resources"].(map[string]any) {
		r := r.(map[string]any)
		if r["Type"] == typ {
			out[id] = r
		}
	}
	return out
}

// props returns the Properties of the resource with logical id id, failing
// the test when there is none of type typ.
func (s *synthesis) props(t *testing.T, typ, id string) map[string]any {
	t.Helper()
	r, ok := s.resources(typ)[id]
	if !ok {
		t.Fatalf("no %s %s", typ, id)
	}
	p, _ := r["Properties"].(map[string]any)
	return p
}

// TestCFNLint validates the synthesized template with cfn-lint, the
// informational checks included, when cfn-lint is installed. I1022 (prefer
// Fn::Sub to Fn::Join) is CDK's own spelling of a string made of tokens,
// which the app does not choose (docs/aws.md).
func TestCFNLint(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	if _, err := exec.LookPath("cfn-lint"); err != nil {
		t.Skip("cfn-lint is not installed")
	}
	file := filepath.Join(synth(t).assembly, "TallyStack.template.json")
	out, err := exec.Command("cfn-lint", "--include-checks", "I", "--ignore-checks", "I1022", "--", file).CombinedOutput()
	if err != nil {
		t.Errorf("cfn-lint --include-checks I: %v\n%s", err, out)
	}
}
