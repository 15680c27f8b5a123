// Package lambdacheck holds the functions' bootstraps to their budgets: an
// API function's bootstrap is at most MaxAPISize, each function links only
// the AWS clients and libraries it uses, and each starts (init: from the
// process's start to its first request for an invocation) within InitMargin
// of an aws-lambda-go hello world measured in the same run. Its tests check
// the sizes, the modules, and the packages each function links (Deps,
// Chain, Importers); `make lambda-check` (scripts/lambdacheck) also
// measures init times, which a test on a shared machine cannot bound.
package lambdacheck

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tally-hq/tally/internal/deploy"
	"github.com/tally-hq/tally/internal/httpapi"
)

// MaxAPISize bounds the bootstrap of an API function (linux/arm64, as
// `make build` makes it).
const MaxAPISize = 9 * (1 << 20)

// MaxPagesSize bounds the bootstrap of a function that renders HTML pages
// (it serves httpapi.GroupDashboard) with html/template: text/template
// calls methods by name through reflection, which keeps the linker from
// dropping any exported method of a reachable type (3.4 MiB more, measured
// on an API function; docs/aws.md).
const MaxPagesSize = 27 * (1 << 19) // 13.5 MiB

// InitMargin is how much longer than the hello world a function may take
// to start.
const InitMargin = 2 * time.Millisecond

// BuildTags and BuildFlags are `make build`'s (Makefile, LAMBDA_BUILD):
// without net/rpc in aws-lambda-go, without HTTP/2 in net/http (Lambda's
// Runtime API, DynamoDB, SQS and Step Functions speak HTTP/1.1, and so does
// every webhook receiver), stripped.
const BuildTags = "lambda.norpc,nethttpomithttp2"

var BuildFlags = []string{"-tags", BuildTags, "-trimpath", "-ldflags=-s -w"}

// HelloPackage is the hello world the init times are measured against.
const HelloPackage = "./internal/lambdacheck/hello"

// Build builds the packages (import paths or ./ paths relative to root)
// like `make build`, for linux/goarch, into dir, and returns each
// bootstrap's path by the package's last path element.
func Build(ctx context.Context, root, dir, goarch string, pkgs ...string) (map[string]string, error) {
	args := append([]string{"build"}, BuildFlags...)
	args = append(args, "-o", dir+string(filepath.Separator))
	cmd := exec.CommandContext(ctx, "go", append(args, pkgs...)...)
	cmd.Dir = root
	cmd.Env = buildEnv(goarch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build: %v\n%s", err, out)
	}
	bins := map[string]string{}
	for _, p := range pkgs {
		bins[filepath.Base(p)] = filepath.Join(dir, filepath.Base(p))
	}
	return bins, nil
}

// buildEnv is the environment `make build` builds in, for linux/goarch.
func buildEnv(goarch string) []string {
	return append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
}

// Package is one package of a build, as `go list -json` describes it.
type Package struct {
	ImportPath string
	Name       string
	Imports    []string // as resolved: the standard library's vendored ones are vendor/…
}

// Deps lists pkgs (import paths, or ./ paths relative to root) and every
// package they import, as Build builds them for linux/goarch (one
// `go list -deps` with BuildTags: the tags drop packages, the other flags
// do not), by import path.
func Deps(ctx context.Context, root, goarch string, pkgs ...string) (map[string]Package, error) {
	args := []string{"list", "-tags", BuildTags, "-deps", "-json=ImportPath,Name,Imports"}
	cmd := exec.CommandContext(ctx, "go", append(args, pkgs...)...)
	cmd.Dir = root
	cmd.Env = buildEnv(goarch)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v\n%s", err, stderr.Bytes())
	}
	deps := map[string]Package{}
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p Package
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list: %v", err)
		}
		deps[p.ImportPath] = p
	}
	return deps, nil
}

// Chain returns a shortest chain of imports by which the package from
// links the package to, from first and to last, or nil when it does not
// link it. deps is what Deps returned for from (among others).
func Chain(deps map[string]Package, from, to string) []string {
	prev := reach(deps, from)
	if _, ok := prev[to]; !ok {
		return nil
	}
	var chain []string
	for p := to; p != ""; p = prev[p] {
		chain = append(chain, p)
	}
	slices.Reverse(chain)
	return chain
}

// Importers returns the packages that from links (itself included) which
// import pkg themselves: every import to cut for from not to link pkg, when
// they are not cut further up.
func Importers(deps map[string]Package, from, pkg string) []string {
	var imps []string
	for p := range reach(deps, from) {
		if slices.Contains(deps[p].Imports, pkg) {
			imps = append(imps, p)
		}
	}
	sort.Strings(imps)
	return imps
}

// reach walks the imports from the package from, breadth first, and
// returns every package it links, from included, by the package that
// first imported it ("" for from).
func reach(deps map[string]Package, from string) map[string]string {
	prev := map[string]string{from: ""}
	for queue := []string{from}; len(queue) > 0; queue = queue[1:] {
		for _, imp := range deps[queue[0]].Imports {
			if _, seen := prev[imp]; !seen {
				prev[imp] = queue[0]
				queue = append(queue, imp)
			}
		}
	}
	return prev
}

// Modules returns the modules linked into a binary (what `go version -m`
// lists as dep).
func Modules(bin string) ([]string, error) {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var mods []string
	for _, d := range info.Deps {
		mods = append(mods, d.Path)
	}
	sort.Strings(mods)
	return mods, nil
}

// Forbidden are modules no function needs: a JSON Schema validator (the
// catalog serves its schemas as files), the embedded store, the SDK's SQS
// client (the functions that queue use internal/sqsjson, 330 KB smaller)
// and the SDK's shared-config, SSO and STS credential chain
// (internal/awsenv configures a function from its environment).
var Forbidden = []string{
	"github.com/santhosh-tekuri/jsonschema/v6",
	"go.etcd.io/bbolt",
	"github.com/aws/aws-sdk-go-v2/service/sqs",
	"github.com/aws/aws-sdk-go-v2/config",
	"github.com/aws/aws-sdk-go-v2/service/sso",
	"github.com/aws/aws-sdk-go-v2/service/ssooidc",
	"github.com/aws/aws-sdk-go-v2/service/sts",
	"github.com/aws/aws-sdk-go-v2/service/signin",
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds",
}

// Clients are AWS service modules a function may link only when it calls
// the service, by the environment variable that names its resource.
var Clients = map[string]string{
	"github.com/aws/aws-sdk-go-v2/service/sfn": "TALLY_RETRY_STATE_MACHINE_ARN",
}

// CheckModules reports the modules bin must not link, given the variable
// names of its environment.
func CheckModules(bin string, env []string) ([]string, error) {
	mods, err := Modules(bin)
	if err != nil {
		return nil, err
	}
	var bad []string
	for _, m := range mods {
		if slices.Contains(Forbidden, m) {
			bad = append(bad, m)
		}
		if v, ok := Clients[m]; ok && !slices.Contains(env, v) {
			bad = append(bad, m+" (no "+v+")")
		}
	}
	return bad, nil
}

// InitTime starts bin against a stand-in of the Lambda Runtime API and
// returns how long it took to ask for its first invocation. env is added
// to a function's usual environment (no AWS call is made during init).
func InitTime(ctx context.Context, bin string, env []string) (time.Duration, error) {
	first := make(chan time.Time, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /2018-06-01/runtime/invocation/next", func(w http.ResponseWriter, r *http.Request) {
		select {
		case first <- time.Now():
		default:
		}
		<-r.Context().Done()
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	defer srv.Close()

	cmd := exec.CommandContext(ctx, bin)
	cmd.Dir = filepath.Dir(bin)
	cmd.Env = append([]string{
		"AWS_LAMBDA_RUNTIME_API=" + ln.Addr().String(),
		"AWS_LAMBDA_FUNCTION_NAME=check", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE=256", "AWS_LAMBDA_FUNCTION_VERSION=$LATEST",
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=x", "AWS_SECRET_ACCESS_KEY=x", "AWS_SESSION_TOKEN=x",
		"TALLY_TABLE=tally", "TALLY_LOG_LEVEL=error", "TZ=:UTC", "PATH=/usr/bin:/bin",
	}, env...)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill() // the process started here, by its pid
		<-exited
	}()
	select {
	case at := <-first:
		return at.Sub(start), nil
	case err := <-exited:
		return 0, fmt.Errorf("%s exited during init: %v", filepath.Base(bin), err)
	case <-time.After(10 * time.Second):
		return 0, fmt.Errorf("%s did not ask for an invocation within 10 s", filepath.Base(bin))
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Medians runs every binary's init rounds times, round-robin (so that
// whatever else the machine does weighs on all of them alike), and returns
// the median of each.
func Medians(ctx context.Context, bins map[string]string, env map[string][]string, rounds int) (map[string]time.Duration, error) {
	names := make([]string, 0, len(bins))
	for n := range bins {
		names = append(names, n)
	}
	sort.Strings(names)
	times := map[string][]time.Duration{}
	for range rounds {
		for _, n := range names {
			d, err := InitTime(ctx, bins[n], env[n])
			if err != nil {
				return nil, err
			}
			times[n] = append(times[n], d)
		}
	}
	out := map[string]time.Duration{}
	for n, ds := range times {
		slices.Sort(ds)
		out[n] = ds[len(ds)/2]
	}
	return out, nil
}

// Function is one function of template.yaml, as the checks see it.
type Function struct {
	Dir   string   // functions/<Dir>
	API   bool     // behind the HTTP API
	Pages bool     // it renders the dashboard's HTML pages
	Env   []string // its environment, KEY=value, with stand-in values
}

// MaxSize is the bootstrap budget of f; 0 when it has none.
func (f Function) MaxSize() int64 {
	switch {
	case f.Pages:
		return MaxPagesSize
	case f.API:
		return MaxAPISize
	}
	return 0
}

// Functions reads the functions: their kind from functions/*/main.go, their
// environment's variables from template.yaml, with values that let them
// start (no AWS call is made during init).
func Functions(root string) ([]Function, error) {
	tpl, err := deploy.Load(filepath.Join(root, "template.yaml"))
	if err != nil {
		return nil, err
	}
	mains, err := deploy.ReadMains(root)
	if err != nil {
		return nil, err
	}
	values := map[string]string{
		"TALLY_TABLE": "tally", "TALLY_RATE_LIMIT": "100", "TALLY_APPLICATION_RATE_LIMIT": "10", "TALLY_DELIVERY_RETENTION_DAYS": "30",
		"TALLY_DELIVERY_QUEUE_URL":      "https://sqs.us-east-1.amazonaws.com/123456789012/tally-DeliveryQueue",
		"TALLY_RETRY_STATE_MACHINE_ARN": "arn:aws:states:us-east-1:123456789012:stateMachine:tally-RetryStateMachine",
	}
	var fns []Function
	for _, m := range mains {
		f, err := tpl.Function(strings.ToUpper(m.Dir[:1]) + m.Dir[1:] + "Function")
		if err != nil {
			return nil, err
		}
		fn := Function{Dir: m.Dir, API: m.Serve == "ServeAPI", Pages: slices.Contains(m.Groups, httpapi.GroupDashboard)}
		for name := range f.Environment {
			v, ok := values[name]
			if !ok {
				v = "x"
			}
			fn.Env = append(fn.Env, name+"="+v)
		}
		sort.Strings(fn.Env)
		fns = append(fns, fn)
	}
	return fns, nil
}

// Names returns the variable names of env (KEY=value).
func Names(env []string) []string {
	var names []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		names = append(names, k)
	}
	return names
}
