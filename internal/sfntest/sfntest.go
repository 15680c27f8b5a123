// Package sfntest runs Step Functions definitions (Amazon States Language)
// in tests, with the npm package aws-local-stepfunctions (the local-sfn
// CLI). `scripts/local-sfn.sh fetch` (which scripts/test.sh runs) puts it,
// and the Node 22 it needs, in .cache/local-sfn. Without them a test that
// calls Find or Run is skipped, or fails when the CI variable is set, since
// CI must not silently skip (the convention of package dynamotest).
//
// # How local-sfn runs an overridden Task state
//
// Read from aws-local-stepfunctions 3.0.0 (bin/CLI.cjs, build/main.node.cjs):
//
//   - `-t State:path` maps a Task state to an executable. The mapping is
//     split at every ':' and only the first two parts are kept, so neither
//     the state's name nor the path may contain one. Run checks this.
//   - For each run of the state, the CLI calls
//     child_process.spawnSync(path, [JSON.stringify(input)]): no shell, so
//     path must be an executable file (a #! script will do), resolved
//     against the working directory when relative. The one argument is the
//     task's effective input, after InputPath and Parameters; for an
//     arn:aws:states:::lambda:invoke task that is the invoke's parameters,
//     {"FunctionName": ..., "Payload": {...}}. Stdin is an empty pipe; the
//     environment and working directory are local-sfn's own, so the
//     variables in Execution.Env reach the program.
//   - The program's whole stdout is parsed with JSON.parse and is the task's
//     raw result, to which ResultSelector, ResultPath and OutputPath then
//     apply. An override of a lambda:invoke task must therefore print what
//     the invoke returns, {"Payload": <the function's result>, "StatusCode":
//     200}, since the state's ResultSelector reads $.Payload.
//   - An exit code other than 0 fails the task with the error message
//     "<path> ('<State>'): <stderr>"; so does stdout that is not JSON. Such
//     an error matches States.TaskFailed and States.ALL, so the state's Retry
//     and Catch fields apply; Execution.Retries shortens the pauses.
//   - spawnSync blocks Node's event loop: tasks run one at a time, and a
//     state's TimeoutSeconds cannot cut a running program short.
//   - A Task state without an override is sent to its Resource on AWS with
//     the SDK; without credentials that fails ("Region is missing") and the
//     state's retriers keep trying for minutes. Run therefore insists on an
//     override for every Task state.
//   - `-w State:ms` makes a Wait state pause ms milliseconds instead of its
//     Seconds, Timestamp, SecondsPath or TimestampPath; `-r State:ms` does
//     the same for the pause before a retry of the state.
//
// The CLI reads the execution input from stdin when stdin is not a
// terminal: one execution per line if the first line is JSON, else all of
// stdin as one input. It prints each execution's result with console.log
// (util.inspect, not JSON: Run preloads jsonlog.cjs to print JSON) and
// exits 0 when every execution succeeded, 2 when one failed (printing its
// error message, "Execution has failed with the following error: ..."),
// and 1 when the definition or the options are invalid.
package sfntest

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/reporoot"
)

// Dir is where scripts/local-sfn.sh installs local-sfn and Node 22,
// relative to the repository root.
const Dir = ".cache/local-sfn"

// DefaultTimeout bounds an execution when Execution.Timeout is 0.
const DefaultTimeout = 2 * time.Minute

//go:embed jsonlog.cjs
var jsonlog []byte

// Tools are the fetched programs.
type Tools struct {
	Root string // the repository root (the directory holding go.mod)
	Node string // the Node 22 binary
	CLI  string // local-sfn: aws-local-stepfunctions/bin/CLI.cjs
}

// Find returns the fetched local-sfn and Node 22. When they are missing it
// skips the test, or fails it when the CI variable is set.
func Find(t testing.TB) Tools {
	t.Helper()
	root, err := reporoot.Find()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, Dir, "node_modules")
	tools := Tools{
		Root: root,
		Node: filepath.Join(dir, ".bin", "node"),
		CLI:  filepath.Join(dir, "aws-local-stepfunctions", "bin", "CLI.cjs"),
	}
	for _, p := range []string{tools.Node, tools.CLI} {
		if _, err := os.Stat(p); err != nil {
			reporoot.Missing(t, fmt.Sprintf("sfntest: no %s: run `./scripts/local-sfn.sh fetch` first", p))
		}
	}
	return tools
}

// Execution is one run of a state machine.
type Execution struct {
	Definition []byte // the state machine, with any substitutions made (see Substitute)
	Input      []byte // the execution's input, JSON

	// Tasks maps every Task state to the executable that runs instead of
	// its resource (see the package documentation for how it is called).
	Tasks map[string]string
	// Waits maps every Wait state to how long it pauses instead (at
	// millisecond precision), or to AsDefined.
	Waits map[string]time.Duration
	// Retries optionally maps states to the pause before each retry of
	// their Retry field, instead of IntervalSeconds and BackoffRate.
	Retries map[string]time.Duration

	Env     []string      // added to the environment of local-sfn and so of the task programs
	Timeout time.Duration // bounds the execution; 0 means DefaultTimeout
}

// AsDefined is a Waits entry that lets the state wait as its definition
// says (a Timestamp or TimestampPath wait that a test keeps short).
const AsDefined time.Duration = -1

// ExecutionError is an execution that failed (local-sfn exit code 2).
type ExecutionError struct {
	Message string // as local-sfn prints it: "Execution has failed with the following error: ..."
}

func (e *ExecutionError) Error() string { return "sfntest: " + e.Message }

// Run executes ex.Definition once with local-sfn and returns the
// execution's output, or an *ExecutionError when the execution failed.
// Problems with the tools, the definition or the overrides fail the test.
func Run(t testing.TB, ex Execution) (json.RawMessage, error) {
	t.Helper()
	tools := Find(t)
	args := checkOverrides(t, ex)
	out, stderr, err := tools.execute(t.Context(), ex, args, t.TempDir())
	if len(stderr) > 0 {
		t.Logf("sfntest: local-sfn stderr:\n%s", stderr)
	}
	var failed *ExecutionError
	if err != nil && !errors.As(err, &failed) {
		t.Fatal(err)
	}
	return out, err
}

// errAborted is what execute returns when ctx ended before the execution.
var errAborted = errors.New("sfntest: the execution was stopped")

// execute runs one execution of ex with local-sfn's options args, in dir.
// It returns the output, or an *ExecutionError for a failed execution,
// errAborted when ctx ended, or another error when local-sfn could not run
// it; and what local-sfn wrote to stderr.
func (tools Tools) execute(ctx context.Context, ex Execution, args []string, dir string) (json.RawMessage, []byte, error) {
	var input bytes.Buffer
	if err := json.Compact(&input, ex.Input); err != nil {
		return nil, nil, fmt.Errorf("sfntest: the execution input is not JSON: %w", err)
	}
	input.WriteByte('\n') // one line: one execution
	def, preload := filepath.Join(dir, "definition.asl.json"), filepath.Join(dir, "jsonlog.cjs")
	if err := os.WriteFile(def, ex.Definition, 0o644); err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(preload, jsonlog, 0o644); err != nil {
		return nil, nil, err
	}

	timeout := ex.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(runCtx, tools.Node, append([]string{"--require", preload, tools.CLI, "-f", def}, args...)...)
	cmd.Env = append(os.Environ(), ex.Env...)
	cmd.Stdin = &input
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	out := bytes.TrimSpace(stdout.Bytes())
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return nil, stderr.Bytes(), errAborted
	case runCtx.Err() != nil:
		return nil, stderr.Bytes(), fmt.Errorf("sfntest: the execution did not end within %v; it printed %q", timeout, out)
	case err == nil:
		if !json.Valid(out) || bytes.Contains(out, []byte("\n")) {
			return nil, stderr.Bytes(), fmt.Errorf("sfntest: local-sfn printed no single JSON result: %q", out)
		}
		return json.RawMessage(out), stderr.Bytes(), nil
	case errors.As(err, &exit) && exit.ExitCode() == 2:
		var msg string
		if json.Unmarshal(out, &msg) != nil {
			return nil, stderr.Bytes(), fmt.Errorf("sfntest: local-sfn printed no error message for a failed execution: %q", out)
		}
		return nil, stderr.Bytes(), &ExecutionError{Message: msg}
	}
	return nil, stderr.Bytes(), fmt.Errorf("sfntest: local-sfn could not run the execution (%v): %s%s", err, out, stderr.Bytes())
}

// checkOverrides checks that every Task and Wait state of the definition has
// an override and every override a state, and returns local-sfn's options.
func checkOverrides(t testing.TB, ex Execution) []string {
	t.Helper()
	states, err := stateTypes(ex.Definition)
	if err != nil {
		t.Fatalf("sfntest: %v", err)
	}
	for _, name := range slices.Sorted(maps.Keys(states)) {
		switch states[name] {
		case "Task":
			if _, ok := ex.Tasks[name]; !ok {
				t.Fatalf("sfntest: Task state %s has no override: local-sfn would invoke its resource on AWS", name)
			}
		case "Wait":
			if _, ok := ex.Waits[name]; !ok {
				t.Fatalf("sfntest: Wait state %s has no override: it would wait its full time", name)
			}
		}
	}
	var args []string
	option := func(flag, state, typ, value string) {
		if got, ok := states[state]; !ok || typ != "" && got != typ {
			t.Fatalf("sfntest: %s %s: the definition has no %sstate of that name", flag, state, strings.TrimPrefix(typ+" ", " "))
		}
		if strings.Contains(state, ":") || strings.Contains(value, ":") {
			t.Fatalf("sfntest: %s %s:%s: local-sfn splits the mapping at every colon, so neither part may have one", flag, state, value)
		}
		if flag != "" {
			args = append(args, flag, state+":"+value)
		}
	}
	for _, state := range slices.Sorted(maps.Keys(ex.Tasks)) {
		path, err := filepath.Abs(ex.Tasks[state])
		if err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(path); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			t.Fatalf("sfntest: the override of %s, %s, is not an executable file", state, path)
		}
		option("--override-task", state, "Task", path)
	}
	for _, state := range slices.Sorted(maps.Keys(ex.Waits)) {
		if ex.Waits[state] == AsDefined {
			option("", state, "Wait", "") // checks the state only
			continue
		}
		option("--override-wait", state, "Wait", milliseconds(ex.Waits[state]))
	}
	for _, state := range slices.Sorted(maps.Keys(ex.Retries)) {
		option("--override-retry", state, "", milliseconds(ex.Retries[state]))
	}
	return args
}

func milliseconds(d time.Duration) string { return strconv.FormatInt(max(d.Milliseconds(), 0), 10) }

// stateTypes returns the type of every state of a definition by name,
// including the states of Parallel branches and Map iterators (local-sfn
// applies overrides by name, wherever the state is).
func stateTypes(def []byte) (map[string]string, error) {
	var root any
	if err := json.Unmarshal(def, &root); err != nil {
		return nil, fmt.Errorf("the definition is not JSON: %w", err)
	}
	types := map[string]string{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if states, ok := v["States"].(map[string]any); ok {
				for name, st := range states {
					if m, ok := st.(map[string]any); ok {
						typ, _ := m["Type"].(string)
						types[name] = typ
					}
				}
			}
			for _, child := range v {
				walk(child)
			}
		case []any:
			for _, child := range v {
				walk(child)
			}
		}
	}
	walk(root)
	if len(types) == 0 {
		return nil, errors.New("the definition has no states")
	}
	return types, nil
}

// Placeholder matches ${Name}: a definition substitution (SAM's
// DefinitionSubstitutions, CDK's definitionSubstitutions), or a placeholder
// of the sample events (envsubst's syntax, events/README.md).
var Placeholder = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// Substitute fills the placeholders of text; one without a value fails the
// test.
func Substitute(t testing.TB, text []byte, vars map[string]string) []byte {
	t.Helper()
	return Placeholder.ReplaceAllFunc(text, func(m []byte) []byte {
		name := string(Placeholder.FindSubmatch(m)[1])
		v, ok := vars[name]
		if !ok {
			t.Fatalf("${%s} has no value in this test (sample placeholders are described in events/README.md)", name)
		}
		return []byte(v)
	})
}

var builds struct {
	mu   sync.Mutex
	done map[string]*build
}

type build struct {
	once sync.Once
	path string
	err  error
}

// Build compiles a main package of this module (an import path such as
// "github.com/tally-hq/tally/internal/sfntest/attempt") once per test
// binary and returns the program's path. The program is kept in
// .cache/sfntest, where go build finds it up to date the next time.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	builds.mu.Lock()
	if builds.done == nil {
		builds.done = map[string]*build{}
	}
	b := builds.done[pkg]
	if b == nil {
		b = &build{}
		builds.done[pkg] = b
	}
	builds.mu.Unlock()
	b.once.Do(func() { b.path, b.err = goBuild(pkg) })
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

func goBuild(pkg string) (string, error) {
	root, err := reporoot.Find()
	if err != nil {
		return "", err
	}
	// go test puts $GOROOT/bin first in the test's PATH.
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("sfntest: build %s: %w", pkg, err)
	}
	out := filepath.Join(root, ".cache", "sfntest", filepath.Base(pkg))
	cmd := exec.Command(goCmd, "build", "-o", out, pkg)
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("sfntest: go build %s: %v\n%s", pkg, err, msg)
	}
	return out, nil
}
