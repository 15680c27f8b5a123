package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/app"
	"github.com/tally-hq/tally/internal/awskms"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/deploy"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/lambdacheck"
	"github.com/tally-hq/tally/internal/lambdafn"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/store/bolt"
	"github.com/tally-hq/tally/internal/store/dynamo"
)

// The checks below hold template.yaml to docs/aws.md (the contract) and to
// the code: the folders in functions/, the route groups their mains serve,
// the routes internal/httpapi registers, the table internal/store/dynamo
// creates, the Makefile's build targets and the keys the services write.

// root is the repository's root.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("repository root: %v", err)
	}
	return dir
}

func load(t *testing.T) *deploy.Template {
	t.Helper()
	tpl, err := deploy.Load(filepath.Join(root(t), "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return tpl
}

func function(t *testing.T, tpl *deploy.Template, id string) deploy.Function {
	t.Helper()
	f, err := tpl.Function(id)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// ---------------------------------------------------------------- the code

// folders are the function folders in functions/ (each holds a main.go).
func folders(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root(t), "functions"))
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(root(t), "functions", e.Name(), "main.go")); e.IsDir() && err == nil {
			dirs = append(dirs, e.Name())
		}
	}
	if len(dirs) == 0 {
		t.Fatal("no functions/*/main.go")
	}
	return dirs
}

// logicalID is the template's name for functions/<dir>.
func logicalID(dir string) string { return strings.ToUpper(dir[:1]) + dir[1:] + "Function" }

// mainOf reads functions/<dir>/main.go: the lambdafn.Serve* it calls and
// the groups it mounts.
func mainOf(t *testing.T, dir string) deploy.Main {
	t.Helper()
	mains, err := deploy.ReadMains(root(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mains {
		if m.Dir == dir {
			return m
		}
	}
	t.Fatalf("no functions/%s", dir)
	return deploy.Main{}
}

// isFallback reports whether functions/<dir> answers the $default route.
func isFallback(t *testing.T, dir string) bool { return mainOf(t, dir).IsFallback() }

// apiFunctions are the logical ids of the functions whose main serves HTTP routes.
func apiFunctions(t *testing.T) map[string]bool {
	out := map[string]bool{}
	for _, dir := range folders(t) {
		if mainOf(t, dir).Serve == "ServeAPI" {
			out[logicalID(dir)] = true
		}
	}
	return out
}

// ---------------------------------------------------------------- the contract

// contract is docs/aws.md: its text and its tables by section heading, each
// a list of rows of cells.
type contract struct {
	text   string
	tables map[string][][]string
}

func readContract(t *testing.T) contract {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), "docs", "aws.md"))
	if err != nil {
		t.Fatal(err)
	}
	c := contract{text: string(b), tables: map[string][][]string{}}
	section := ""
	for _, line := range strings.Split(c.text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "## "):
			section = strings.TrimPrefix(line, "## ")
		case strings.HasPrefix(line, "|"):
			cells := strings.Split(strings.Trim(line, "|"), "|")
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			if strings.Trim(strings.Join(cells, ""), "-: ") == "" {
				continue // the separator row
			}
			c.tables[section] = append(c.tables[section], cells)
		}
	}
	return c
}

// rows returns the table without its header row of the one section whose
// heading starts with heading.
func (c contract) rows(t *testing.T, heading string) [][]string {
	t.Helper()
	var found [][]string
	n := 0
	for section, rows := range c.tables {
		if strings.HasPrefix(section, heading) {
			found, n = rows, n+1
		}
	}
	if n != 1 || len(found) < 2 {
		t.Fatalf("docs/aws.md has no one table under a heading starting %q", heading)
	}
	return found[1:]
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// spans returns the `code` spans of s.
func spans(s string) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// ---------------------------------------------------------------- tests

func TestParseIntrinsics(t *testing.T) {
	short := `
Resources:
  A:
    Type: X
    Properties:
      ref: !Ref Table
      getatt: !GetAtt Table.Arn
      sub: !Sub "${Table.Arn}/index/*"
      if: !If [C, !Ref P, !Ref AWS::NoValue]
      list: [!GetAtt [Q, Arn], 5, true, "5"]
`
	long := `{"Resources": {"A": {"Type": "X", "Properties": {
	  "ref": {"Ref": "Table"},
	  "getatt": {"Fn::GetAtt": ["Table", "Arn"]},
	  "sub": {"Fn::Sub": "${Table.Arn}/index/*"},
	  "if": {"Fn::If": ["C", {"Ref": "P"}, {"Ref": "AWS::NoValue"}]},
	  "list": [{"Fn::GetAtt": ["Q", "Arn"]}, 5, true, "5"]}}}}`
	a, err := deploy.Parse([]byte(short))
	if err != nil {
		t.Fatal(err)
	}
	b, err := deploy.Parse([]byte(long))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a.Resources, b.Resources) {
		t.Errorf("short and long forms differ:\n%#v\n%#v", a.Resources, b.Resources)
	}
	p := a.Resources["A"].Properties
	if p["ref"] != deploy.Ref("Table") || !reflect.DeepEqual(p["getatt"], deploy.GetAtt("Table", "Arn")) ||
		p["sub"] != deploy.Sub("${Table.Arn}/index/*") {
		t.Errorf("intrinsics: %#v", p)
	}
	if l := p["list"].([]any); l[1] != 5 || l[2] != true || l[3] != "5" {
		t.Errorf("scalars: %#v", l)
	}
	if _, err := deploy.Parse([]byte("Resources:\n  A:\n    Type: X\n    Properties: {a: !Nope x}\n")); err == nil {
		t.Error("an unknown tag parsed")
	}

	// Conditions are decided with the parameters' defaults, or given values.
	c, err := deploy.Parse([]byte(`
Parameters:
  P: {Type: String, Default: ""}
Conditions:
  C: !Not [!Equals [!Ref P, ""]]
Resources:
  A:
    Type: X
    Properties:
      Env: {X: !If [C, !Ref P, !Ref AWS::NoValue], Y: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	env := c.Resources["A"].Properties["Env"]
	for _, tc := range []struct {
		params map[string]string
		want   map[string]any
	}{
		{nil, map[string]any{"Y": 1}},
		{map[string]string{"P": "http://x"}, map[string]any{"X": deploy.Ref("P"), "Y": 1}},
	} {
		got, err := c.Resolve(env, tc.params)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Resolve with %v = %#v, %v; want %#v", tc.params, got, err, tc.want)
		}
	}
}

func TestResourcesAreTheContracts(t *testing.T) {
	tpl, c := load(t), readContract(t)
	var want []string
	for _, row := range c.rows(t, "Resources") {
		switch {
		case row[0] == "alarms":
			for _, alarm := range c.rows(t, "Alarms") {
				for _, fn := range perFunction(t, spans(alarm[0])[0]) {
					want = append(want, strings.ReplaceAll(spans(alarm[0])[0], functionPattern, fn))
				}
			}
		case strings.HasPrefix(row[0], "`<Function>"):
			for _, dir := range folders(t) {
				want = append(want, logicalID(dir)+strings.Trim(strings.TrimPrefix(row[0], "`<Function>"), "`"))
			}
		default:
			want = append(want, spans(row[0])...)
		}
	}
	sort.Strings(want)
	if got := tpl.IDs(""); !slices.Equal(got, want) {
		t.Errorf("template resources\n%v\nwant (docs/aws.md)\n%v", got, want)
	}
	if !slices.Contains(spans(c.text), "AWS::Serverless-2016-10-31") && tpl.Transform != "AWS::Serverless-2016-10-31" {
		t.Errorf("Transform = %v", tpl.Transform)
	}
}

func TestFunctionsAreTheFolders(t *testing.T) {
	tpl, c := load(t), readContract(t)
	var want []string
	for _, dir := range folders(t) {
		want = append(want, logicalID(dir))
	}
	if got := tpl.IDs("AWS::Serverless::Function"); !slices.Equal(got, want) {
		t.Fatalf("functions in template.yaml %v, want one per functions/<name>: %v", got, want)
	}

	// Timeouts from the contract: "API functions 10 s, approver 60 s, …".
	timeouts := map[string]int{}
	for _, m := range regexp.MustCompile(`(API functions|approver|fanout|deliver|attempt|reconciler|rollup) (\d+) s\b`).FindAllStringSubmatch(c.text, -1) {
		timeouts[m[1]], _ = strconv.Atoi(m[2])
	}
	if len(timeouts) != 7 {
		t.Fatalf("docs/aws.md timeouts: %v", timeouts)
	}
	for _, s := range []string{"`provided.al2023`", "`arm64`", "handler `bootstrap`", "memory 256 MB"} {
		if !strings.Contains(c.text, s) {
			t.Errorf("docs/aws.md no longer says %s: update this test and template.yaml", s)
		}
	}
	api := apiFunctions(t)
	for _, dir := range folders(t) {
		f := function(t, tpl, logicalID(dir))
		if f.BuildMethod != "makefile" || f.CodeURI != "." {
			t.Errorf("%s: BuildMethod %q CodeUri %v, want makefile and .", f.LogicalID, f.BuildMethod, f.CodeURI)
		}
		memory := 256
		if f.LogicalID == "ReconcilerFunction" {
			memory = 1024 // CPU for its re-drives (docs/aws.md, "The reconciler")
		}
		if f.Runtime != "provided.al2023" || !slices.Equal(f.Architectures, []string{"arm64"}) || f.Handler != "bootstrap" || f.MemorySize != memory {
			t.Errorf("%s: %s %v %s %d MB, want provided.al2023 [arm64] bootstrap %d MB", f.LogicalID, f.Runtime, f.Architectures, f.Handler, f.MemorySize, memory)
		}
		logGroup := f.LogicalID + "LogGroup"
		if f.LogGroup != deploy.Ref(logGroup) {
			t.Errorf("%s logs to %v, want its own log group %s", f.LogicalID, f.LogGroup, logGroup)
		} else if lg := tpl.Resources[logGroup]; lg.Type != "AWS::Logs::LogGroup" || lg.Properties["RetentionInDays"] != deploy.Ref("LogRetentionDays") {
			t.Errorf("%s: %+v, want a log group keeping logs LogRetentionDays", logGroup, lg)
		}
		key := dir
		if api[f.LogicalID] {
			key = "API functions"
		}
		if f.Timeout != timeouts[key] {
			t.Errorf("%s: Timeout %d, want %d (docs/aws.md)", f.LogicalID, f.Timeout, timeouts[key])
		}
	}
}

// TestMakefileBuildsEachFunction runs `make -n build-<LogicalId>` as
// `sam build` would and checks the command it would run.
func TestMakefileBuildsEachFunction(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	artifacts := t.TempDir()
	for _, dir := range folders(t) {
		target := "build-" + logicalID(dir)
		out, err := exec.Command("make", "--no-print-directory", "-s", "-n", "-C", root(t), target, "ARTIFACTS_DIR="+artifacts).CombinedOutput()
		if err != nil {
			t.Errorf("make %s: %v\n%s", target, err, out)
			continue
		}
		cmd := strings.TrimSpace(string(out))
		for _, want := range []string{"CGO_ENABLED=0 ", "GOOS=linux ", "GOARCH=arm64 ", " build ", "-tags " + lambdacheck.BuildTags + " ", "-trimpath", "-ldflags='-s -w'",
			`-o "` + artifacts + `/bootstrap"`} {
			if !strings.Contains(cmd, want) {
				t.Errorf("make %s runs %q: no %s", target, cmd, want)
			}
		}
		if !strings.HasSuffix(cmd, " ./functions/"+dir) {
			t.Errorf("make %s runs %q: does not build ./functions/%s", target, cmd, dir)
		}
	}
	if out, err := exec.Command("make", "-s", "-n", "-C", root(t), "build-NoSuchFunction", "ARTIFACTS_DIR="+artifacts).CombinedOutput(); err == nil {
		t.Errorf("make build-NoSuchFunction succeeded:\n%s", out)
	}
}

func TestRoutesAreWhatHttpapiServes(t *testing.T) {
	tpl, c := load(t), readContract(t)
	contractRoutes := map[string][]string{}
	for _, row := range c.rows(t, "Routes") {
		r := spans(row[1])
		sort.Strings(r)
		contractRoutes[row[0]+"Function"] = r
	}
	served := map[string]string{} // route → function
	for _, dir := range folders(t) {
		id := logicalID(dir)
		f := function(t, tpl, id)
		groups := mainOf(t, dir).Groups
		var want []string
		for _, g := range groups {
			want = append(want, httpapi.Routes(g)...)
		}
		if isFallback(t, dir) {
			// No route of its own: it is what no other route matches.
			if len(want) > 0 {
				t.Errorf("%s: the fallback group serves %v, want no route", id, want)
			}
			want = []string{deploy.DefaultRoute}
		}
		sort.Strings(want)
		got, err := f.Routes()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s routes\n%v\nwant (internal/httpapi, groups %v)\n%v", id, got, groups, want)
		}
		if cr, ok := contractRoutes[id]; (ok || len(want) > 0) && !slices.Equal(cr, want) {
			t.Errorf("%s: docs/aws.md lists %v, internal/httpapi serves %v", id, cr, want)
		}
		for _, e := range f.EventsOfType("HttpApi") {
			r, _ := e.HTTPRoute()
			if r.API != deploy.Ref("HttpApi") || (r.PayloadFormatVersion != "" && r.PayloadFormatVersion != "2.0") {
				t.Errorf("%s event %s: ApiId %v, PayloadFormatVersion %q; want !Ref HttpApi, 2.0", id, e.Name, r.API, r.PayloadFormatVersion)
			}
		}
		for _, r := range got {
			if other, dup := served[r]; dup {
				t.Errorf("%s is routed to both %s and %s", r, other, id)
			}
			served[r] = id
		}
	}
	// What no route matches goes to the fallback, not to API Gateway's
	// {"message":"Not Found"}.
	if fn, ok := served[deploy.DefaultRoute]; !ok {
		t.Errorf("no function has the %s route: unmatched requests would not answer in the API's error shape", deploy.DefaultRoute)
	} else if dir := strings.ToLower(strings.TrimSuffix(fn, "Function")); !isFallback(t, dir) {
		t.Errorf("the %s route goes to %s, which does not serve httpapi.GroupFallback alone", deploy.DefaultRoute, fn)
	}
	// Every route but the local server's admin API is deployed.
	for _, g := range httpapi.AllGroups {
		for _, r := range httpapi.Routes(g) {
			if _, ok := served[r]; !ok && g != httpapi.GroupAdmin {
				t.Errorf("%s (group %s) is served by no function", r, g)
			}
			if _, ok := served[r]; ok && g == httpapi.GroupAdmin {
				t.Errorf("the admin route %s is deployed", r)
			}
		}
	}
	if r, ok := tpl.Resources["HttpApi"]; !ok || r.Type != "AWS::Serverless::HttpApi" {
		t.Errorf("HttpApi is %q, want AWS::Serverless::HttpApi", r.Type)
	}
}

// TestHTTPRouteKeys reads HttpApi events the way SAM does, the $default
// route included.
func TestHTTPRouteKeys(t *testing.T) {
	tpl, err := deploy.Parse([]byte(`
Resources:
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        Get: {Type: HttpApi, Properties: {Method: get, Path: "/things/{id}"}}
        Any: {Type: HttpApi, Properties: {Method: any, Path: /things}}
        Default: {Type: HttpApi, Properties: {Method: ANY, Path: $default}}
        Neither: {Type: HttpApi}
        Extension: {Type: HttpApi, Properties: {Method: x-amazon-apigateway-any-method, Path: $default}}
        DefaultGet: {Type: HttpApi, Properties: {Method: GET, Path: $default}}
        NoMethod: {Type: HttpApi, Properties: {Path: /things}}
`))
	if err != nil {
		t.Fatal(err)
	}
	f := function(t, tpl, "Fn")
	for name, want := range map[string]string{
		"Get": "GET /things/{id}", "Any": "ANY /things", "Default": "$default", "Neither": "$default", "Extension": "$default",
		"DefaultGet": "", "NoMethod": "",
	} {
		r, err := f.Events[name].HTTPRoute()
		switch {
		case want == "" && err == nil:
			t.Errorf("%s: read as %q, want an error", name, r.Key())
		case want != "" && (err != nil || r.Key() != want):
			t.Errorf("%s: %q, %v; want %q", name, r.Key(), err, want)
		}
	}
}

// TestSampleEventsMatchRoutes: every sample API event in events/ is for a
// route its function has.
func TestSampleEventsMatchRoutes(t *testing.T) {
	tpl := load(t)
	paths, err := filepath.Glob(filepath.Join(root(t), "events", "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("events/*.json: %v", err)
	}
	for _, p := range paths {
		var ev struct {
			RouteKey string `json:"routeKey"`
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &ev); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if ev.RouteKey == "" {
			continue
		}
		dir, _, _ := strings.Cut(filepath.Base(p), "-")
		f := function(t, tpl, logicalID(dir))
		routes, _ := f.Routes()
		if !slices.Contains(routes, ev.RouteKey) {
			t.Errorf("%s: routeKey %q is not a route of %s %v", filepath.Base(p), ev.RouteKey, f.LogicalID, routes)
		}
	}
}

// localOnly are variables the template declares for sam local only; with
// the parameters' defaults they are not deployed.
var localOnly = []string{"AWS_ENDPOINT_URL"}

func TestEnvironment(t *testing.T) {
	tpl, c := load(t), readContract(t)
	// What each variable the code reads is set to.
	values := map[string]any{
		app.EnvTable:                     deploy.Ref("Table"),
		app.EnvDeliveryRetention:         deploy.Ref("DeliveryRetentionDays"),
		lambdafn.EnvDeliveryQueueURL:     deploy.Ref("DeliveryQueue"),
		lambdafn.EnvRetryStateMachineARN: deploy.Ref("RetryStateMachine"),
		awskms.EnvKeyARN:                 deploy.GetAtt("SecretsKey", "Arn"),
		lambdafn.EnvDeliverConcurrency:   deploy.Ref("DeliverMaxConcurrency"),
		lambdafn.EnvFanoutDLQURL:         deploy.Ref("FanoutDLQ"),
		app.EnvRateLimit:                 deploy.Ref("RateLimit"),
		app.EnvApplicationRateLimit:      deploy.Ref("ApplicationRateLimit"),
		app.EnvClickRateLimit:            deploy.Ref("ClickRateLimit"),
	}
	api := apiFunctions(t)
	fns, err := tpl.Functions()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]any{}
	for _, f := range fns {
		want[f.LogicalID] = map[string]any{}
	}
	for _, row := range c.rows(t, "Environment") {
		for _, name := range spans(row[0]) {
			v, ok := values[name]
			if !ok {
				t.Fatalf("docs/aws.md names %s, which this test does not know", name)
			}
			for id := range want {
				switch {
				case row[1] == "all", strings.HasPrefix(row[1], "all,"),
					// "API functions except `X`, `Y` (…), …"
					strings.HasPrefix(row[1], "API functions") && api[id] && !slices.Contains(spans(row[1]), id),
					!strings.HasPrefix(row[1], "API functions") && slices.Contains(spans(row[1]), id):
					want[id][name] = v
				}
			}
		}
	}
	for _, f := range fns {
		if !reflect.DeepEqual(f.Environment, want[f.LogicalID]) {
			t.Errorf("%s environment\n%v\nwant (docs/aws.md)\n%v", f.LogicalID, f.Environment, want[f.LogicalID])
		}
		declared := append(slices.Collect(maps.Keys(want[f.LogicalID])), localOnly...)
		sort.Strings(declared)
		if !slices.Equal(f.DeclaredEnvironment, declared) {
			t.Errorf("%s declares %v, want %v", f.LogicalID, f.DeclaredEnvironment, declared)
		}
		// With an endpoint given, the functions get it (sam local, LocalStack).
		env, err := tpl.Resolve(f.Properties["Environment"], map[string]string{"LocalEndpointUrl": "http://127.0.0.1:4566"})
		if err != nil {
			t.Fatal(err)
		}
		if v := env.(map[string]any)["Variables"].(map[string]any)["AWS_ENDPOINT_URL"]; v != deploy.Ref("LocalEndpointUrl") {
			t.Errorf("%s: AWS_ENDPOINT_URL with LocalEndpointUrl set = %v", f.LogicalID, v)
		}
	}

	// Parameters and their defaults: the contract's and httpapi's.
	for name, def := range map[string]int{"RateLimit": httpapi.DefaultRateLimit, "ApplicationRateLimit": httpapi.DefaultApplicationRateLimit, "ClickRateLimit": httpapi.DefaultClickRateLimit} {
		p, ok := tpl.Parameters[name]
		if !ok || p.Type != "Number" || p.Default != def {
			t.Errorf("parameter %s = %+v, want Number with default %d", name, p, def)
		}
		if !strings.Contains(c.text, "`"+name+"` ("+strconv.Itoa(def)+")") {
			t.Errorf("docs/aws.md does not give %s the default %d", name, def)
		}
	}
}

// TestEnvLocalJSON checks env.local.json, the --env-vars file for sam local:
// SAM CLI only sets variables the template declares for the function, and
// ignores function entries when the file has a "Parameters" entry.
func TestEnvLocalJSON(t *testing.T) {
	tpl := load(t)
	b, err := os.ReadFile(filepath.Join(root(t), "env.local.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file map[string]map[string]string
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatalf("env.local.json: %v", err)
	}
	fns, err := tpl.Functions()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, f := range fns {
		ids = append(ids, f.LogicalID)
		vars, ok := file[f.LogicalID]
		if !ok {
			t.Errorf("env.local.json has no %s", f.LogicalID)
			continue
		}
		names := slices.Sorted(maps.Keys(vars))
		if !slices.Equal(names, f.DeclaredEnvironment) {
			t.Errorf("env.local.json sets %v for %s, which declares %v", names, f.LogicalID, f.DeclaredEnvironment)
		}
		for name, v := range vars {
			if v == "" {
				t.Errorf("env.local.json: %s.%s is empty", f.LogicalID, name)
			}
		}
	}
	for id := range file {
		if !slices.Contains(ids, id) {
			t.Errorf("env.local.json has %s, which is not a function of template.yaml", id)
		}
	}
}

func TestTableIsWhatCreateTableMakes(t *testing.T) {
	tpl := load(t)
	tb, err := tpl.Table("Table")
	if err != nil {
		t.Fatal(err)
	}
	def := dynamo.TableDefinition("tally")
	attrs := map[string]string{}
	for _, a := range def.AttributeDefinitions {
		attrs[*a.AttributeName] = string(a.AttributeType)
	}
	keys := func(ks []deploy.KeyElement) []string {
		var out []string
		for _, k := range ks {
			out = append(out, k.AttributeName+" "+k.KeyType)
		}
		return out
	}
	var wantKeys []string
	for _, k := range def.KeySchema {
		wantKeys = append(wantKeys, *k.AttributeName+" "+string(k.KeyType))
	}
	if tb.BillingMode != string(def.BillingMode) || !maps.Equal(tb.AttributeTypes, attrs) || !slices.Equal(keys(tb.KeySchema), wantKeys) {
		t.Errorf("table: %s %v %v; CreateTable: %s %v %v", tb.BillingMode, tb.AttributeTypes, keys(tb.KeySchema), def.BillingMode, attrs, wantKeys)
	}
	got := map[string]string{}
	for _, ix := range tb.GlobalSecondaryIndexes {
		got[ix.Name] = strings.Join(keys(ix.KeySchema), ", ") + " / " + ix.ProjectionType + " " + strings.Join(ix.NonKeyAttributes, ", ")
	}
	want := map[string]string{}
	for _, ix := range def.GlobalSecondaryIndexes {
		var ks []string
		for _, k := range ix.KeySchema {
			ks = append(ks, *k.AttributeName+" "+string(k.KeyType))
		}
		want[*ix.IndexName] = strings.Join(ks, ", ") + " / " + string(ix.Projection.ProjectionType) + " " + strings.Join(ix.Projection.NonKeyAttributes, ", ")
	}
	if !maps.Equal(got, want) {
		t.Errorf("indexes %v, CreateTable's %v", got, want)
	}
	if !*def.StreamSpecification.StreamEnabled || tb.StreamViewType != string(def.StreamSpecification.StreamViewType) {
		t.Errorf("stream %q, CreateTable's %q", tb.StreamViewType, def.StreamSpecification.StreamViewType)
	}
	if tb.TTLAttribute != dynamo.TTLAttribute || !tb.TTLEnabled {
		t.Errorf("TTL on %q (enabled %v), want %q", tb.TTLAttribute, tb.TTLEnabled, dynamo.TTLAttribute)
	}
	if !tb.PointInTimeRecovery {
		t.Error("point-in-time recovery is off")
	}
	if tb.DeletionPolicy != "Retain" || tb.UpdateReplacePolicy != "Retain" {
		t.Errorf("DeletionPolicy %q UpdateReplacePolicy %q: the table must outlive its stack", tb.DeletionPolicy, tb.UpdateReplacePolicy)
	}
	// DynamoDB refuses to delete it, unless a dev stack turns that off.
	if v := tpl.Resources["Table"].Properties["DeletionProtectionEnabled"]; !reflect.DeepEqual(v, deploy.Ref("TableDeletionProtection")) {
		t.Errorf("DeletionProtectionEnabled %v, want !Ref TableDeletionProtection", v)
	}
	if p := tpl.Parameters["TableDeletionProtection"]; p.Type != "String" || fmt.Sprint(p.Properties["AllowedValues"]) != "[true false]" {
		t.Errorf("parameter TableDeletionProtection %+v, want a String, true or false", p)
	}
}

// TestWarmThroughput: the table and each index are pre-warmed only when
// their parameters ask (0, the default, leaves it to DynamoDB), to what
// the parameters say.
func TestWarmThroughput(t *testing.T) {
	tpl := load(t)
	tb := tpl.Resources["Table"].Properties
	warm := map[string]any{"Table": tb["WarmThroughput"]}
	for _, ix := range tb["GlobalSecondaryIndexes"].([]any) {
		warm["index "+toString(mapOf(ix)["IndexName"])] = mapOf(ix)["WarmThroughput"]
	}
	if len(warm) != 4 {
		t.Fatalf("warm throughput of %d of the table and its indexes, want 4", len(warm))
	}
	for what, v := range warm {
		prefix := "Index"
		if what == "Table" {
			prefix = "Table"
		}
		want := deploy.Intrinsic{Fn: "Fn::If", Arg: []any{"Has" + prefix + "WarmThroughput", map[string]any{
			"WriteUnitsPerSecond": deploy.Ref(prefix + "WarmWriteUnitsPerSecond"),
			"ReadUnitsPerSecond":  deploy.Intrinsic{Fn: "Fn::If", Arg: []any{"Has" + prefix + "WarmReads", deploy.Ref(prefix + "WarmReadUnitsPerSecond"), deploy.Ref("AWS::NoValue")}},
		}, deploy.Ref("AWS::NoValue")}}
		if !reflect.DeepEqual(v, want) {
			t.Errorf("%s WarmThroughput %s, want %s", what, toString(v), toString(want))
		}
		for _, c := range []struct {
			cond, param string
		}{{"Has" + prefix + "WarmThroughput", prefix + "WarmWriteUnitsPerSecond"}, {"Has" + prefix + "WarmReads", prefix + "WarmReadUnitsPerSecond"}} {
			for value, on := range map[string]bool{"": false, "0": false, "80000": true} {
				params := map[string]string{}
				if value != "" {
					params[c.param] = value
				}
				if got, err := tpl.Condition(c.cond, params); err != nil || got != on {
					t.Errorf("%s with %s=%q: %v (%v), want %v", c.cond, c.param, value, got, err, on)
				}
			}
		}
	}
}

func TestRetryStateMachine(t *testing.T) {
	tpl := load(t)
	sm, err := tpl.StateMachine("RetryStateMachine")
	if err != nil {
		t.Fatal(err)
	}
	if sm.Type != "STANDARD" || sm.DefinitionURI != "statemachine/retry.asl.json" {
		t.Errorf("state machine %s %v, want STANDARD statemachine/retry.asl.json", sm.Type, sm.DefinitionURI)
	}
	b, err := os.ReadFile(filepath.Join(root(t), "statemachine", "retry.asl.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(b) {
		t.Fatal("statemachine/retry.asl.json is not JSON")
	}
	placeholders := map[string]bool{}
	for _, m := range regexp.MustCompile(`\$\{([^}]+)\}`).FindAllStringSubmatch(string(b), -1) {
		placeholders[m[1]] = true
	}
	if got, want := slices.Sorted(maps.Keys(sm.Substitutions)), slices.Sorted(maps.Keys(placeholders)); !slices.Equal(got, want) {
		t.Errorf("DefinitionSubstitutions %v, the definition's placeholders %v", got, want)
	}
	if v := sm.Substitutions["AttemptFunctionArn"]; !reflect.DeepEqual(v, deploy.GetAtt("AttemptFunction", "Arn")) {
		t.Errorf("AttemptFunctionArn = %v, want !GetAtt AttemptFunction.Arn", v)
	}
	if len(sm.Policies) > 0 {
		t.Errorf("state machine policies %+v: its role is RetryStateMachineRole (TestLeastPrivilege)", sm.Policies)
	}
}

func TestEventSources(t *testing.T) {
	tpl, c := load(t), readContract(t)
	api := apiFunctions(t)
	fns, err := tpl.Functions()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fns {
		types := map[string]int{}
		for _, e := range f.Events {
			types[e.Type]++
		}
		var want map[string]int
		switch {
		case api[f.LogicalID]:
			want = map[string]int{"HttpApi": len(f.Events)}
		case f.LogicalID == "ApproverFunction", f.LogicalID == "ReconcilerFunction":
			want = map[string]int{"Schedule": 1}
			if types["ScheduleV2"] == 1 {
				want = map[string]int{"ScheduleV2": 1}
			}
		case f.LogicalID == "FanoutFunction", f.LogicalID == "RollupFunction":
			want = map[string]int{"DynamoDB": 1}
		case f.LogicalID == "DeliverFunction":
			want = map[string]int{"SQS": 1}
		default: // attempt: invoked by the state machine only
			want = map[string]int{}
		}
		if !maps.Equal(types, want) {
			t.Errorf("%s events %v, want %v", f.LogicalID, types, want)
		}
	}

	for id, want := range map[string]string{"ApproverFunction": "rate(1 minute)", "ReconcilerFunction": "rate(5 minutes)"} {
		for _, e := range function(t, tpl, id).Events {
			if expr, err := e.ScheduleExpression(); err != nil || expr != want {
				t.Errorf("%s schedule %q, %v; want %s", id, expr, err, want)
			}
		}
	}

	fanout := function(t, tpl, "FanoutFunction")
	for _, e := range fanout.EventsOfType("DynamoDB") {
		s, err := e.StreamSource()
		if err != nil {
			t.Fatal(err)
		}
		want := deploy.StreamSource{
			Stream:                     deploy.GetAtt("Table", "StreamArn"),
			StartingPosition:           "LATEST",
			BatchSize:                  100,
			BisectBatchOnFunctionError: true,
			MaximumRetryAttempts:       10,
			MaximumRecordAgeInSeconds:  maxRecordAge,
			FunctionResponseTypes:      []string{"ReportBatchItemFailures"},
			OnFailure:                  deploy.Destination{Type: "SQS", Destination: deploy.GetAtt("FanoutDLQ", "Arn")},
			FilterPatterns:             s.FilterPatterns,
		}
		if !reflect.DeepEqual(s, want) {
			t.Errorf("fan-out stream source\n%+v\nwant\n%+v", s, want)
		}
		var docPatterns []string
		for _, sp := range spans(c.text) {
			if strings.HasPrefix(sp, `{"eventName"`) && (strings.Contains(sp, "EVT#") || strings.Contains(sp, `"fanout"`)) {
				docPatterns = append(docPatterns, sp)
			}
		}
		patterns := lambdafn.StreamFilterPatterns
		same := func(got []string) bool {
			return len(got) == len(patterns) && !slices.ContainsFunc(patterns, func(w string) bool {
				return !slices.ContainsFunc(got, func(g string) bool { return jsonEqual(t, g, w) })
			})
		}
		if !same(s.FilterPatterns) || !same(docPatterns) {
			t.Errorf("filter patterns %q, want lambdafn.StreamFilterPatterns %q (docs/aws.md: %q)", s.FilterPatterns, patterns, docPatterns)
		}
	}

	// No record holds the rollup function's shard for long: one it cannot
	// read fails alone (rollup.Handler, in internal/lambdafn/rollup, reports
	// batch item failures), and after 10 retries or 6 hours records go to
	// RollupDLQ, whose alarm tells (and clears once it is drained), while
	// the stream still keeps them. It reads from the stream's start: its
	// shard checkpoints skip what it added before. The tumbling window
	// gives each batch its shard id.
	for _, e := range function(t, tpl, "RollupFunction").EventsOfType("DynamoDB") {
		s, err := e.StreamSource()
		if err != nil {
			t.Fatal(err)
		}
		want := deploy.StreamSource{
			Stream:                         deploy.GetAtt("Table", "StreamArn"),
			StartingPosition:               "TRIM_HORIZON",
			BatchSize:                      1000,
			MaximumBatchingWindowInSeconds: 15,
			BisectBatchOnFunctionError:     true,
			MaximumRetryAttempts:           10,
			MaximumRecordAgeInSeconds:      maxRecordAge,
			FunctionResponseTypes:          []string{"ReportBatchItemFailures"},
			OnFailure:                      deploy.Destination{Type: "SQS", Destination: deploy.GetAtt("RollupDLQ", "Arn")},
			TumblingWindowInSeconds:        60,
			FilterPatterns:                 []string{lambdafn.RollupFilterPattern},
		}
		if len(s.FilterPatterns) == 1 && jsonEqual(t, s.FilterPatterns[0], lambdafn.RollupFilterPattern) {
			s.FilterPatterns = want.FilterPatterns
		}
		if !reflect.DeepEqual(s, want) {
			t.Errorf("rollup stream source\n%+v\nwant\n%+v", s, want)
		}
		if !strings.Contains(c.text, lambdafn.RollupFilterPattern) {
			t.Errorf("docs/aws.md does not give the rollup filter, lambdafn.RollupFilterPattern %s", lambdafn.RollupFilterPattern)
		}
	}

	deliver := function(t, tpl, "DeliverFunction")
	for _, e := range deliver.EventsOfType("SQS") {
		q, err := e.QueueSource()
		if err != nil {
			t.Fatal(err)
		}
		want := deploy.QueueSource{Queue: deploy.GetAtt("DeliveryQueue", "Arn"), BatchSize: 10, FunctionResponseTypes: []string{"ReportBatchItemFailures"},
			MaximumConcurrency: deploy.Ref("DeliverMaxConcurrency")}
		if !reflect.DeepEqual(q, want) {
			t.Errorf("deliver queue source %+v, want %+v", q, want)
		}
	}
	// The parameter allows what an SQS event source's MaximumConcurrency
	// does (its default is the contract's, TestParametersAreTheContracts).
	if p := tpl.Parameters["DeliverMaxConcurrency"]; p.Type != "Number" || fmt.Sprint(p.Properties["MinValue"]) != "2" || fmt.Sprint(p.Properties["MaxValue"]) != "1000" {
		t.Errorf("parameter DeliverMaxConcurrency %+v, want a Number from 2 to 1000", p)
	}
	queue, err := tpl.Queue("DeliveryQueue")
	if err != nil {
		t.Fatal(err)
	}
	if queue.VisibilityTimeout != 180 || queue.VisibilityTimeout < 6*deliver.Timeout ||
		!reflect.DeepEqual(queue.DeadLetterTarget, deploy.GetAtt("DeliveryDLQ", "Arn")) || queue.MaxReceiveCount != 5 {
		t.Errorf("DeliveryQueue %+v: want visibility 180 s (≥ 6 × deliver's %d s), redrive to DeliveryDLQ after 5", queue, deliver.Timeout)
	}
	for _, id := range []string{"DeliveryDLQ", "FanoutDLQ", "RollupDLQ"} {
		if a := tpl.Resources[id+"Alarm"].Properties; !reflect.DeepEqual(a["OKActions"], []any{deploy.Ref("AlarmTopic")}) {
			t.Errorf("%sAlarm OKActions %v, want AlarmTopic: the alarm says when %s is drained", id, a["OKActions"], id)
		}
	}
	for _, id := range []string{"DeliveryDLQ", "FanoutDLQ", "RollupDLQ"} {
		q, err := tpl.Queue(id)
		if err != nil {
			t.Fatal(err)
		}
		if q.MessageRetentionPeriod != 14*24*3600 {
			t.Errorf("%s keeps messages %d s, want 14 days", id, q.MessageRetentionPeriod)
		}
	}
}

// maxRecordAge is the stream mappings' MaximumRecordAgeInSeconds: 6
// hours, so that what they give up the stream (24 hours) still holds for
// 18 more.
const maxRecordAge = 6 * 3600

func jsonEqual(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// TestLeastPrivilege checks every permission of every role against what
// the function does, derived from what drives it (its main's lambdafn call
// and groups), its environment and its event sources, so a new function
// gets the permissions of its kind without a line here: its own log group;
// the table's actions the store makes for it (docs/aws.md, "Least
// privilege"); the queue and state machine it names in its environment;
// reading its stream or polling its queue, and its on-failure destination.
// Nothing is granted on "*", no managed policy is attached.
func TestLeastPrivilege(t *testing.T) {
	tpl := load(t)
	// What the pipeline's steps do to the table: read, and put whole items.
	byKind := map[string][]string{
		"ServeApprover":   {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"},
		"ServeFanout":     {"dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem"},
		"ServeDeliver":    {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}, // and the endpoint's health
		"ServeAttempt":    {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"},
		"ServeReconciler": {"dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem"},
		"ServeRollup":     {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}, // the shard's checkpoint, the rollups
	}
	indexKinds := []string{"ServeAPI", "ServeApprover", "ServeReconciler"} // they query gsi1–3
	rate := `{"ForAllValues:StringLike":{"dynamodb:LeadingKeys":["` + rateCounterKeys + `","` + apiKeyItems + `"]}}`
	for _, dir := range folders(t) {
		m, f := mainOf(t, dir), function(t, tpl, logicalID(dir))
		want := []string{"logs:CreateLogStream " + f.LogicalID + "LogGroup", "logs:PutLogEvents " + f.LogicalID + "LogGroup"}
		add := func(resource string, actions ...string) {
			for _, a := range actions {
				want = append(want, a+" "+resource)
			}
		}
		switch {
		case m.IsFallback() || m.Serve == "ServeAPI" && (slices.Equal(m.Groups, []string{httpapi.GroupReports}) || slices.Equal(m.Groups, []string{httpapi.GroupHealth})):
			// They only read (the fallback answers what no route matches),
			// and count requests.
			add("Table", "dynamodb:GetItem", "dynamodb:Query")
			want = append(want, "dynamodb:UpdateItem Table if "+rate) // the rate-limit counters
		case m.Serve == "ServeAPI":
			add("Table", "dynamodb:GetItem", "dynamodb:Query", "dynamodb:ConditionCheckItem")
			// Writes only where dynamodb:LeadingKeys says: which writes in
			// which partitions, internal/partitions's test derives from the
			// function's code. Every API function counts requests.
			for _, a := range []string{"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"} {
				if cond, granted := writeCondition(t, tpl, f.Role, a); granted || a == "dynamodb:UpdateItem" {
					want = append(want, a+" Table if "+cond)
				}
			}
		default:
			add("Table", byKind[m.Serve]...)
			if len(byKind[m.Serve]) == 0 {
				t.Errorf("functions/%s calls lambdafn.%s, which this test gives no table access", dir, m.Serve)
			}
		}
		if slices.Contains(indexKinds, m.Serve) {
			add("Table/index", "dynamodb:Query")
		}
		if f.Environment[lambdafn.EnvDeliveryQueueURL] != nil {
			add("DeliveryQueue", "sqs:SendMessage")
		}
		if m.Serve == "ServeReconciler" {
			add("DeliveryQueue", "sqs:GetQueueAttributes")                                 // the backlog
			add("FanoutDLQ", "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:SendMessage") // failed stream batches
		}
		if f.Environment[awskms.EnvKeyARN] != nil {
			// Those that sign open secrets; those that set them (the API's)
			// seal them, and the first to need it makes the data key.
			add("SecretsKey", "kms:Decrypt")
			if m.Serve == "ServeAPI" {
				add("SecretsKey", "kms:GenerateDataKey")
			}
		}
		if f.Environment[lambdafn.EnvRetryStateMachineARN] != nil {
			add("RetryStateMachine", "states:StartExecution")
			add("RetryStateMachine/executions", "states:DescribeExecution")
		}
		for _, e := range f.EventsOfType("DynamoDB") {
			s, _ := e.StreamSource()
			add(deploy.ARNResource(s.Stream), "dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:ListStreams")
			if s.OnFailure.Destination != nil {
				add(deploy.ARNResource(s.OnFailure.Destination), "sqs:SendMessage")
			}
		}
		for _, e := range f.EventsOfType("SQS") {
			q, _ := e.QueueSource()
			add(deploy.ARNResource(q.Queue), "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes")
		}
		checkRole(t, tpl, f.LogicalID, f.Role, "lambda.amazonaws.com", want)
	}
	sm, err := tpl.StateMachine("RetryStateMachine")
	if err != nil {
		t.Fatal(err)
	}
	checkRole(t, tpl, sm.LogicalID, sm.Role, "states.amazonaws.com", []string{"lambda:InvokeFunction AttemptFunction"})
}

// writeCondition is the condition of role's action on the table, when it
// is one ForAllValues:StringLike of dynamodb:LeadingKeys ("" otherwise),
// and whether the role grants the action at all.
func writeCondition(t *testing.T, tpl *deploy.Template, role any, action string) (string, bool) {
	t.Helper()
	id, err := deploy.RoleOf(role)
	if err != nil {
		return "", false
	}
	grants, _, err := tpl.RoleGrants(id)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range grants {
		if g.Action != action || g.Resource != "Table" {
			continue
		}
		var cond map[string]map[string][]string
		if json.Unmarshal([]byte(g.Condition), &cond) == nil && len(cond) == 1 &&
			len(cond["ForAllValues:StringLike"]) == 1 && len(cond["ForAllValues:StringLike"]["dynamodb:LeadingKeys"]) > 0 {
			return g.Condition, true
		}
		return "", true
	}
	return "", false
}

// checkRole compares the grants of a principal's role with want.
func checkRole(t *testing.T, tpl *deploy.Template, principal string, role any, service string, want []string) {
	t.Helper()
	id, err := deploy.RoleOf(role)
	if err != nil {
		t.Errorf("%s: %v (a role of its own, not SAM's generated one)", principal, err)
		return
	}
	grants, assumedBy, err := tpl.RoleGrants(id)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(assumedBy, []string{service}) {
		t.Errorf("%s may be assumed by %v, want %s", id, assumedBy, service)
	}
	var got []string
	for _, g := range grants {
		got = append(got, g.String())
		if strings.Contains(g.Resource, "*") {
			t.Errorf("%s grants %s on %s", id, g.Action, g.Resource)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s (%s) may do\n%s\nwant\n%s", id, principal, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// rateCounterKeys is the partition keys ReportsFunction and the fallback
// may update: the rate-limit counters.
const rateCounterKeys = "RATE#*"

// apiKeyItems is the partition keys of the API key records, whose lastUsedAt
// every API function updates.
const apiKeyItems = "KEY#*"

// TestAlarms holds the alarms to the contract's Alarms table: metric, what
// it watches, statistic and threshold, and that every one notifies
// AlarmTopic when it fires and when it clears. A row of `<Function>…`
// stands for one alarm per function.
func TestAlarms(t *testing.T) {
	tpl, c := load(t), readContract(t)
	alarms, err := tpl.Alarms()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, row := range c.rows(t, "Alarms") {
		for _, fn := range perFunction(t, spans(row[0])[0]) {
			at := func(s string) string { return strings.ReplaceAll(s, functionPattern, fn) }
			want[at(spans(row[0])[0])] = spans(row[1])[0] + " of " + at(spans(row[2])[0]) + ": " + spans(row[3])[0]
		}
	}
	got := map[string]string{}
	for _, a := range alarms {
		metric, stat, period := a.Namespace+" "+a.MetricName, a.Statistic, a.Period
		dims := []map[string]any{a.Dimensions}
		if a.Expression != "" {
			// The inputs of an expression: one namespace, statistic and
			// period, their metric names in order.
			var names []string
			dims = nil
			for _, in := range a.Inputs {
				if !slices.Contains(names, in.MetricName) {
					names = append(names, in.MetricName)
				}
				if in.Namespace != a.Inputs[0].Namespace || in.Statistic != a.Inputs[0].Statistic || in.Period != a.Inputs[0].Period {
					t.Errorf("%s: input %s is %+v, unlike the others", a.LogicalID, in.LogicalID, in)
				}
				dims = append(dims, in.Dimensions)
			}
			if len(a.Inputs) == 0 {
				t.Fatalf("%s has an expression and no metric", a.LogicalID)
			}
			metric, stat, period = a.Inputs[0].Namespace+" "+strings.Join(names, "+"), a.Inputs[0].Statistic, a.Inputs[0].Period
		} else if len(a.Dimensions) != 1 && !(a.Namespace == "AWS/Lambda" && len(a.Dimensions) == 0) {
			t.Errorf("%s has dimensions %v, want one (or none, all functions)", a.LogicalID, a.Dimensions)
		}
		got[a.LogicalID] = fmt.Sprintf("%s of %s: %s > %v", metric, watched(dims[0]), stat, a.Threshold)
		if a.ComparisonOperator != "GreaterThanThreshold" || a.EvaluationPeriods != 1 || period != 300 || a.TreatMissingData != "notBreaching" {
			t.Errorf("%s: %+v, want one 5-minute period, missing data not breaching", a.LogicalID, a)
		}
		if !reflect.DeepEqual(a.AlarmActions, []any{deploy.Ref("AlarmTopic")}) {
			t.Errorf("%s notifies %v, want AlarmTopic", a.LogicalID, a.AlarmActions)
		}
	}
	if !maps.Equal(got, want) {
		for id := range maps.Keys(want) {
			if got[id] != want[id] {
				t.Errorf("%s: template %q, docs/aws.md %q", id, got[id], want[id])
			}
		}
		for id := range maps.Keys(got) {
			if _, ok := want[id]; !ok {
				t.Errorf("%s (%s) is not in docs/aws.md's Alarms", id, got[id])
			}
		}
	}
	topic, sub := tpl.Resources["AlarmTopic"], tpl.Resources["AlarmEmailSubscription"]
	if topic.Type != "AWS::SNS::Topic" || sub.Type != "AWS::SNS::Subscription" || sub.Condition != "HasAlarmEmail" ||
		sub.Properties["Endpoint"] != deploy.Ref("AlarmEmail") || sub.Properties["TopicArn"] != deploy.Ref("AlarmTopic") {
		t.Errorf("AlarmTopic %+v, AlarmEmailSubscription %+v: want a topic and, with AlarmEmail set, that address subscribed", topic, sub)
	}
	// The topic is encrypted with a key of the stack whose policy lets
	// CloudWatch publish (the AWS managed alias/aws/sns does not).
	key := tpl.Resources["AlarmTopicKey"]
	if topic.Properties["KmsMasterKeyId"] != deploy.Ref("AlarmTopicKey") || key.Type != "AWS::KMS::Key" || key.Properties["EnableKeyRotation"] != true {
		t.Errorf("AlarmTopic %+v, AlarmTopicKey %+v: want the topic encrypted with a rotated key of the stack", topic.Properties, key)
	}
	policy, _ := key.Properties["KeyPolicy"].(map[string]any)
	stmts, _ := policy["Statement"].([]any)
	cloudwatch := slices.ContainsFunc(stmts, func(s any) bool {
		st, _ := s.(map[string]any)
		return st["Effect"] == "Allow" && reflect.DeepEqual(st["Principal"], map[string]any{"Service": "cloudwatch.amazonaws.com"}) &&
			reflect.DeepEqual(st["Action"], []any{"kms:Decrypt", "kms:GenerateDataKey*"})
	})
	if !cloudwatch {
		t.Errorf("AlarmTopicKey's policy %v does not let cloudwatch.amazonaws.com use it: alarms could not publish", stmts)
	}
	for _, params := range []map[string]string{nil, {"AlarmEmail": "ops@example.com"}} {
		on, err := tpl.Condition("HasAlarmEmail", params)
		if err != nil || on != (params != nil) {
			t.Errorf("HasAlarmEmail with %v = %v, %v", params, on, err)
		}
	}
}

// functionPattern stands for each function's logical id in the contract's
// per-function rows.
const functionPattern = "<Function>"

// perFunction returns the logical ids a contract row's pattern stands for:
// every function's when it has functionPattern, else itself.
func perFunction(t *testing.T, pattern string) []string {
	if !strings.Contains(pattern, functionPattern) {
		return []string{""}
	}
	var ids []string
	for _, dir := range folders(t) {
		ids = append(ids, logicalID(dir))
	}
	return ids
}

// watched names the resource a metric's dimensions point at: the logical
// id a dimension's value refers to (a queue by its name), or the value;
// "all functions" for AWS/Lambda's metric of the account and region.
func watched(dims map[string]any) string {
	if len(dims) == 0 {
		return "all functions"
	}
	for _, name := range []string{"FunctionName", "QueueName", "StateMachineArn", "ApiId", "TableName"} {
		switch v := dims[name].(type) {
		case deploy.Intrinsic:
			return strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(v.String(), "!Ref "), "!GetAtt "), ".QueueName")
		case string:
			return v
		}
	}
	return fmt.Sprint(dims)
}

// TestEveryFailureHasAnAlarm derives from the template what can fail and
// checks an alarm watches each: every function's errors and throttles, the
// HTTP API's 5xx answers, throttled reads and writes of every table and
// each of its indexes, every state machine's failed, timed-out, throttled
// and aborted executions, every dead-letter queue and every stream's
// iterator age. A new function, queue, index or state machine without its
// alarms fails here. Every alarm notifies AlarmTopic when it fires and when
// it clears, so that no page is left open without a word.
func TestEveryFailureHasAnAlarm(t *testing.T) {
	tpl := load(t)
	alarms, err := tpl.Alarms()
	if err != nil {
		t.Fatal(err)
	}
	// What the alarms watch: "namespace metric dimension=value,…".
	watches := map[string]string{}
	key := func(ns, metric string, dims map[string]any) string {
		var parts []string
		for _, name := range slices.Sorted(maps.Keys(dims)) {
			parts = append(parts, name+"="+toString(dims[name]))
		}
		return ns + " " + metric + " " + strings.Join(parts, ",")
	}
	for _, a := range alarms {
		if a.Expression == "" {
			watches[key(a.Namespace, a.MetricName, a.Dimensions)] = a.LogicalID
		}
		for _, in := range a.Inputs {
			watches[key(in.Namespace, in.MetricName, in.Dimensions)] = a.LogicalID
		}
		if !reflect.DeepEqual(a.OKActions, []any{deploy.Ref("AlarmTopic")}) || !reflect.DeepEqual(a.AlarmActions, a.OKActions) {
			t.Errorf("%s: AlarmActions %v, OKActions %v; want AlarmTopic for both: an alarm says when it clears", a.LogicalID, a.AlarmActions, a.OKActions)
		}
	}
	need := func(what, ns, metric string, dims map[string]any) {
		t.Helper()
		if _, ok := watches[key(ns, metric, dims)]; !ok {
			t.Errorf("%s: no alarm watches %s %s %v", what, ns, metric, dims)
		}
	}
	fns, err := tpl.Functions()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fns {
		by := map[string]any{"FunctionName": deploy.Ref(f.LogicalID)}
		need(f.LogicalID+" fails", "AWS/Lambda", "Errors", by)
		if f.ReservedConcurrency > 0 { // refused on its own; the others share the account's
			need(f.LogicalID+" is throttled", "AWS/Lambda", "Throttles", by)
		}
		if len(f.EventsOfType("DynamoDB")) > 0 {
			need(f.LogicalID+" falls behind its stream", "AWS/Lambda", "IteratorAge", by)
		}
	}
	need("a function without reserved concurrency is throttled", "AWS/Lambda", "Throttles", map[string]any{})
	need("the HTTP API answers 5xx", "AWS/ApiGateway", "5xx", map[string]any{"ApiId": deploy.Ref("HttpApi")})
	for _, id := range tpl.IDs("AWS::DynamoDB::Table") {
		table, err := tpl.Table(id)
		if err != nil {
			t.Fatal(err)
		}
		for _, metric := range []string{"ReadThrottleEvents", "WriteThrottleEvents"} {
			need(id+" throttles", "AWS/DynamoDB", metric, map[string]any{"TableName": deploy.Ref(id)})
			for _, ix := range table.GlobalSecondaryIndexes {
				need(id+"'s "+ix.Name+" throttles", "AWS/DynamoDB", metric, map[string]any{"TableName": deploy.Ref(id), "GlobalSecondaryIndexName": ix.Name})
			}
		}
	}
	for _, id := range tpl.IDs("AWS::Serverless::StateMachine") {
		for _, metric := range []string{"ExecutionsFailed", "ExecutionsTimedOut", "ExecutionThrottled", "ExecutionsAborted"} {
			need(id, "AWS/States", metric, map[string]any{"StateMachineArn": deploy.Ref(id)})
		}
	}
	// Dead-letter queues: a queue's redrive target, or a stream's
	// on-failure destination.
	for _, id := range tpl.IDs("AWS::SQS::Queue") {
		q, err := tpl.Queue(id)
		if err != nil {
			t.Fatal(err)
		}
		if q.DeadLetterTarget != nil {
			dlq := strings.TrimSuffix(strings.TrimPrefix(toString(q.DeadLetterTarget), "!GetAtt "), ".Arn")
			need(dlq+" holds what "+id+" gave up", "AWS/SQS", "ApproximateNumberOfMessagesVisible", map[string]any{"QueueName": deploy.GetAtt(dlq, "QueueName")})
			need(id+" is late", "AWS/SQS", "ApproximateAgeOfOldestMessage", map[string]any{"QueueName": deploy.GetAtt(id, "QueueName")})
		}
	}
	for _, f := range fns {
		for _, e := range f.EventsOfType("DynamoDB") {
			s, _ := e.StreamSource()
			if s.OnFailure.Destination != nil {
				dlq := deploy.ARNResource(s.OnFailure.Destination)
				need(dlq+" holds what "+f.LogicalID+" gave up", "AWS/SQS", "ApproximateNumberOfMessagesVisible", map[string]any{"QueueName": deploy.GetAtt(dlq, "QueueName")})
			}
		}
	}
}

// TestRunbookHasEveryAlarm checks that docs/aws.md's Runbook has an entry
// (a heading) for every alarm of the template, per function as the
// Alarms table has them: whoever gets paged finds what to do.
func TestRunbookHasEveryAlarm(t *testing.T) {
	tpl, c := load(t), readContract(t)
	start := strings.Index(c.text, "\n## Runbook\n")
	if start < 0 {
		t.Fatal("docs/aws.md has no Runbook section")
	}
	runbook := c.text[start+1:]
	if end := strings.Index(runbook[3:], "\n## "); end >= 0 {
		runbook = runbook[:end+3]
	}
	entries := map[string]bool{}
	for _, line := range strings.Split(runbook, "\n") {
		if strings.HasPrefix(line, "### ") {
			for _, id := range spans(line) {
				entries[id] = true
			}
		}
	}
	functions := map[string]bool{}
	for _, dir := range folders(t) {
		functions[logicalID(dir)] = true
	}
	for _, id := range tpl.IDs("AWS::CloudWatch::Alarm") {
		entry := id
		for fn := range functions {
			if rest, ok := strings.CutPrefix(id, fn); ok && rest == "ErrorsAlarm" {
				entry = functionPattern + rest
			}
		}
		if !entries[entry] {
			t.Errorf("docs/aws.md's Runbook has no \"### `%s`\" entry (for %s)", entry, id)
		}
	}
}

// TestParametersAreTheContracts checks the template's parameters and their
// defaults against the contract's Parameters table.
func TestParametersAreTheContracts(t *testing.T) {
	tpl, c := load(t), readContract(t)
	var want []string
	for _, row := range c.rows(t, "Parameters") {
		defaults := strings.Split(row[1], ", ")
		for i, name := range spans(row[0]) {
			def := defaults[min(i, len(defaults)-1)]
			if def == "empty" {
				def = ""
			}
			want = append(want, name+"="+def)
		}
	}
	var got []string
	for name, p := range tpl.Parameters {
		got = append(got, fmt.Sprintf("%s=%v", name, p.Default))
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("parameters %v, want (docs/aws.md) %v", got, want)
	}
}

// TestConcurrency: the reconciler's runs never overlap; the approver's
// overlap while a backlog lasts, up to as many as start within its timeout
// (a run every minute), each taking shards of its own; every route has a
// throttle for every client together.
func TestConcurrency(t *testing.T) {
	tpl := load(t)
	fns, err := tpl.Functions()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fns {
		scheduled := len(f.EventsOfType("Schedule"))+len(f.EventsOfType("ScheduleV2")) > 0
		want := map[bool]int{true: 1}[scheduled]
		if f.LogicalID == "ApproverFunction" {
			want = f.Timeout / 60 // runs of a minute apart that are still working
		}
		if f.ReservedConcurrency != want || want == 0 && scheduled {
			t.Errorf("%s: reserved concurrency %d, want %d", f.LogicalID, f.ReservedConcurrency, want)
		}
	}
	settings := mapOf(tpl.Resources["HttpApi"].Properties["DefaultRouteSettings"])
	if settings["ThrottlingRateLimit"] != deploy.Ref("ApiThrottlingRateLimit") || settings["ThrottlingBurstLimit"] != deploy.Ref("ApiThrottlingBurstLimit") {
		t.Errorf("HttpApi DefaultRouteSettings %v, want the throttling parameters", settings)
	}
}

// TestRouteThrottles: the stage's default settings are per route, so the
// routes that carry the load (conversions, the GET postback, clicks) have
// throttles of their own, from their own parameters, and each names a
// route the API has.
func TestRouteThrottles(t *testing.T) {
	tpl := load(t)
	fns, err := tpl.Functions()
	if err != nil {
		t.Fatal(err)
	}
	routes := map[string]bool{}
	for _, f := range fns {
		for _, e := range f.EventsOfType("HttpApi") {
			r, err := e.HTTPRoute()
			if err != nil {
				t.Fatal(err)
			}
			routes[r.Key()] = true
		}
	}
	want := map[string]string{
		"POST /api/v1/conversions": "Conversions",
		"GET /postback":            "Conversions",
		"GET /c/{offerId}":         "Click",
	}
	settings := mapOf(tpl.Resources["HttpApi"].Properties["RouteSettings"])
	for key, prefix := range want {
		s := mapOf(settings[key])
		if s["ThrottlingRateLimit"] != deploy.Ref(prefix+"ThrottlingRateLimit") || s["ThrottlingBurstLimit"] != deploy.Ref(prefix+"ThrottlingBurstLimit") {
			t.Errorf("HttpApi RouteSettings[%q] = %v, want the %sThrottling… parameters", key, s, prefix)
		}
	}
	for key := range settings {
		if !routes[key] {
			t.Errorf("HttpApi RouteSettings names %q, which is no route of the API", key)
		}
		if want[key] == "" {
			t.Errorf("HttpApi RouteSettings[%q]: a route the test does not know", key)
		}
	}
}

// TestCapacityParameters: the parameters docs/aws.md's "Capacity" names
// are the template's, and its parameter set for 10k/s is one a deployment
// accepts (each value within its parameter's bounds).
func TestCapacityParameters(t *testing.T) {
	tpl, c := load(t), readContract(t)
	parameterName := regexp.MustCompile(`^[A-Z][a-z]+[A-Za-z]*$`)
	named, col := 0, -1
	table := c.tables["Capacity"]
	if len(table) > 0 {
		col = slices.Index(table[0], "raised by")
	}
	if col < 0 {
		t.Fatal(`docs/aws.md's "Capacity" table has no column "raised by"`)
	}
	for _, row := range table[1:] {
		if col >= len(row) {
			continue // the next table of the section
		}
		for _, cell := range row[col : col+1] {
			for _, name := range spans(cell) {
				if !parameterName.MatchString(name) {
					continue
				}
				named++
				if _, ok := tpl.Parameters[name]; !ok {
					t.Errorf("docs/aws.md's capacity table raises a limit by %s, which is no parameter of template.yaml", name)
				}
			}
		}
	}
	if named < 5 {
		t.Errorf("docs/aws.md's capacity table names %d parameters; the test reads it wrong", named)
	}
	line := regexp.MustCompile("(?m)^sam deploy --parameter-overrides (.+)$").FindStringSubmatch(c.text)
	if line == nil {
		t.Fatal("docs/aws.md has no `sam deploy --parameter-overrides …` line")
	}
	for _, kv := range strings.Fields(line[1]) {
		name, value, ok := strings.Cut(kv, "=")
		p, known := tpl.Parameters[name]
		if !ok || !known {
			t.Errorf("parameter set: %q is not Name=Value of a template parameter", kv)
			continue
		}
		if p.Type != "Number" {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Errorf("parameter set: %s=%s is not a number", name, value)
			continue
		}
		if lo, ok := p.Properties["MinValue"]; ok && v < toFloat(lo) {
			t.Errorf("parameter set: %s=%s is below its MinValue %v", name, value, lo)
		}
		if hi, ok := p.Properties["MaxValue"]; ok && v > toFloat(hi) {
			t.Errorf("parameter set: %s=%s is above its MaxValue %v", name, value, hi)
		}
	}
}

func toFloat(v any) float64 {
	f, _ := strconv.ParseFloat(fmt.Sprint(v), 64)
	return f
}

func mapOf(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func toString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	if i, ok := v.(deploy.Intrinsic); ok {
		return i.String()
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func TestOutputs(t *testing.T) {
	tpl := load(t)
	want := map[string]any{
		"BaseUrl":              deploy.Sub("${HttpApi.ApiEndpoint}/api/v1"),
		"PublicBaseUrl":        deploy.GetAtt("HttpApi", "ApiEndpoint"),
		"TableName":            deploy.Ref("Table"),
		"DeliveryQueueUrl":     deploy.Ref("DeliveryQueue"),
		"RetryStateMachineArn": deploy.Ref("RetryStateMachine"),
		"AlarmTopicArn":        deploy.Ref("AlarmTopic"),
	}
	got := map[string]any{}
	for id, o := range tpl.Outputs {
		got[id] = o.Value
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("outputs\n%v\nwant\n%v", got, want)
	}
}

// ---------------------------------------------------------------- the keys the services write

// recorder records the writes that reach the store.
type recorder struct {
	store.Store
	mu  sync.Mutex
	ops []store.Op
}

func (r *recorder) Transact(ctx context.Context, ops ...store.Op) error {
	err := r.Store.Transact(ctx, ops...)
	if err == nil {
		r.mu.Lock()
		r.ops = append(r.ops, ops...)
		r.mu.Unlock()
	}
	return err
}

func (r *recorder) Update(ctx context.Context, op store.Op) (store.Item, error) {
	it, err := r.Store.Update(ctx, op)
	if err == nil {
		r.mu.Lock()
		r.ops = append(r.ops, op)
		r.mu.Unlock()
	}
	return it, err
}

func ptr[T any](v T) *T { return &v }

// TestStreamFilterPassesEventInsertsOnly runs the services (conversions
// written for the stream, as on AWS) over the embedded store, records every
// write that can insert an item (and so make an INSERT stream record), and
// checks that the fan-out's filters let through exactly the event items and
// the conversions whose events the fan-out makes, and that the rate
// counters are what ReportsFunction may update.
func TestStreamFilterPassesEventInsertsOnly(t *testing.T) {
	ctx := context.Background()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "tally.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rec := &recorder{Store: st}
	svc := servicetest.New(rec, service.WithLoopbackReceivers(), service.WithStreamConversions())

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	brand, err := svc.Identity.CreateBrand(ctx, "Acme")
	must(err)
	_, err = svc.Endpoints.CreateSubscription(ctx, brand.ID, endpoints.SubscriptionInput{
		URL: ptr("http://127.0.0.1:9/hooks"), Events: []string{tally.EventConversionCreated, tally.EventPartnerApplied, tally.EventPartnerApproved},
	})
	must(err)
	offer, err := svc.Offers.CreateOffer(ctx, brand.ID, offers.OfferInput{
		Name: ptr("Shoes"), DestinationURL: ptr("https://shop.example/?c={click_id}"),
		RevenueCents: ptr[int64](1000), PayoutCents: ptr[int64](300), Currency: ptr("USD"), Approval: ptr(tally.ApprovalManual),
	})
	must(err)
	partner, err := svc.Partners.Apply(ctx, brand.ID, partners.ApplicationInput{Name: ptr("Pat"), Email: ptr("pat@example.com")})
	must(err)
	_, err = svc.Partners.ApprovePartner(ctx, brand.ID, partner.ID)
	must(err)
	conv, _, err := svc.Conversions.RecordConversion(ctx, brand.ID, conversions.ConversionInput{OfferID: &offer.ID, PartnerID: &partner.ID, ExternalTxnID: ptr("order-1")})
	must(err)
	// The fan-out makes its event from the stream's record of it.
	for _, op := range slices.Clone(rec.ops) {
		if op.Kind == store.OpPut && op.Item.SK == conv.ID && strings.HasPrefix(op.Item.PK, "BRD#") {
			_, err = svc.Webhooks.DispatchConversion(ctx, op.Item, nil)
			must(err)
		}
	}
	// It writes no event; a stack deployed before has the conversion.created
	// items it wrote, named by their outbox attribute, whose records the
	// filter must drop still.
	if i := slices.IndexFunc(rec.ops, func(op store.Op) bool { return strings.HasPrefix(op.Item.PK, "EVT#") && op.Item.Attrs["outbox"] != "" }); i >= 0 {
		t.Errorf("the fan-out wrote %s/%s", rec.ops[i].Item.PK, rec.ops[i].Item.SK)
	}
	made := tally.Event{ID: "evt_01m8h60qt2t4szdeeprq0qabjd", Event: tally.EventConversionCreated, CreatedAt: conv.CreatedAt, BrandID: brand.ID}
	rec.ops = append(rec.ops, store.Put(store.Item{Key: store.Key{PK: "EVT#" + made.ID, SK: "#EVT"},
		Attrs: map[string]string{"type": made.Event, "brandId": brand.ID, "outbox": conv.ID}, Data: records.MustJSON(made)}))
	_, err = svc.Conversions.ApproveConversion(ctx, brand.ID, conv.ID)
	must(err)
	_, err = svc.Limits.Allow(ctx, "key:key_test", 100)
	must(err)
	evts, _, err := svc.Events.Events(ctx, brand.ID, records.ListParams{Limit: 100})
	must(err)
	for _, e := range evts {
		_, err := svc.Webhooks.FanOut(ctx, e.ID)
		must(err)
	}

	patterns := make([]any, len(lambdafn.StreamFilterPatterns))
	for i, p := range lambdafn.StreamFilterPatterns {
		must(json.Unmarshal([]byte(p), &patterns[i]))
	}
	hash := ""
	for _, k := range dynamo.TableDefinition("tally").KeySchema {
		if k.KeyType == "HASH" {
			hash = *k.AttributeName
		}
	}
	rateKey := regexp.MustCompile("^" + strings.ReplaceAll(regexp.QuoteMeta(rateCounterKeys), `\*`, ".*") + "$")
	var nEvents, nMade, nConversions, nOthers, nRate int
	for _, op := range rec.ops {
		if op.Kind != store.OpPut && op.Kind != store.OpUpdate {
			continue // deletes and checks insert nothing
		}
		if op.Kind == store.OpPut && slices.ContainsFunc(op.Conds, func(c store.Cond) bool { return c.Kind != store.CondNotExists }) {
			continue // it replaces an item that must be there: a MODIFY, which no filter passes
		}
		key := op.Target()
		// The record Lambda filters: what DynamoDB Streams sends for an insert.
		keys := map[string]events.DynamoDBAttributeValue{hash: events.NewStringAttribute(key.PK), "sk": events.NewStringAttribute(key.SK)}
		image := maps.Clone(keys)
		for name, v := range op.Item.Attrs {
			image[name] = events.NewStringAttribute(v)
		}
		for name, v := range op.Set {
			image[name] = events.NewStringAttribute(v)
		}
		record := events.DynamoDBEventRecord{EventName: "INSERT", Change: events.DynamoDBStreamRecord{Keys: keys, NewImage: image}}
		var doc any
		b, _ := json.Marshal(record)
		must(json.Unmarshal(b, &doc))
		passes := false
		for _, pattern := range patterns {
			ok, err := matches(pattern, doc)
			must(err)
			passes = passes || ok
		}

		var ev tally.Event
		var conv tally.Conversion
		isEvent := op.Kind == store.OpPut && json.Unmarshal(op.Item.Data, &ev) == nil && strings.HasPrefix(ev.ID, "evt_") && ev.Event != ""
		// A new conversion (put if absent; its approval puts it again).
		isConversion := op.Kind == store.OpPut && json.Unmarshal(op.Item.Data, &conv) == nil && strings.HasPrefix(conv.ID, "cnv_") &&
			strings.HasPrefix(key.PK, "BRD#") && slices.Contains(op.Conds, store.NotExists())
		switch {
		case isEvent && op.Item.Attrs["outbox"] != "":
			// Written by the fan-out itself, from a conversion (above).
			nMade++
			if passes {
				t.Errorf("the filter lets through event %s, which the fan-out made", ev.ID)
			}
		case isEvent:
			nEvents++
			if !passes {
				t.Errorf("the filter drops event %s (%s) at %s/%s", ev.ID, ev.Event, key.PK, key.SK)
			}
		case isConversion:
			// Its event is made by the fan-out (service.WithStreamConversions).
			nConversions++
			if !passes {
				t.Errorf("the filter drops conversion %s at %s/%s", conv.ID, key.PK, key.SK)
			}
		default:
			nOthers++
			if passes {
				t.Errorf("the filter lets through a non-event write at %s/%s", key.PK, key.SK)
			}
		}
		if op.Kind == store.OpUpdate && op.Add["n"] > 0 && strings.Contains(key.PK, "key:key_test") {
			nRate++
			if !rateKey.MatchString(key.PK) {
				t.Errorf("the rate counter %s is not under %s, which ReportsFunction may update", key.PK, rateCounterKeys)
			}
		}
	}
	// partner.applied, partner.approved, conversion.approved; the conversion
	// (its marker is among the others).
	if nEvents < 3 || nMade != 1 || nConversions != 1 || nOthers < 6 || nRate != 1 {
		t.Errorf("saw %d event writes, %d made by the fan-out, %d conversions, %d others, %d rate counts: the scenario no longer exercises the filter", nEvents, nMade, nConversions, nOthers, nRate)
	}
}

// matches applies a Lambda event filter pattern (the subset of EventBridge
// patterns it uses: objects, lists of exact values, {"prefix": …} and
// {"exists": …}) to a JSON document.
func matches(pattern, doc any) (bool, error) {
	switch p := pattern.(type) {
	case map[string]any:
		d, ok := doc.(map[string]any)
		if _, none := doc.(absent); none {
			d, ok = map[string]any{}, true // its leaves are absent too
		}
		if !ok {
			return false, nil
		}
		for k, sub := range p {
			v, ok := d[k]
			if !ok {
				v = absent{}
			}
			m, err := matches(sub, v)
			if err != nil || !m {
				return false, err
			}
		}
		return true, nil
	case []any:
		for _, alt := range p {
			switch a := alt.(type) {
			case map[string]any:
				if exists, ok := a["exists"].(bool); ok && len(a) == 1 {
					if _, none := doc.(absent); none != exists {
						return true, nil
					}
					continue
				}
				prefix, ok := a["prefix"].(string)
				if !ok || len(a) != 1 {
					return false, errUnsupported(a)
				}
				if s, ok := doc.(string); ok && strings.HasPrefix(s, prefix) {
					return true, nil
				}
			default:
				if reflect.DeepEqual(a, doc) {
					return true, nil
				}
			}
		}
		return false, nil
	}
	return false, errUnsupported(pattern)
}

// absent stands for a field the document does not have.
type absent struct{}

// unsupportedError is a filter pattern matches does not know.
type unsupportedError struct{ pattern any }

func errUnsupported(p any) error { return unsupportedError{p} }

func (e unsupportedError) Error() string { return "unsupported filter pattern " + toString(e.pattern) }

// TestCFNLint validates the template with cfn-lint (which runs the SAM
// translator), its informational checks included, when it is installed.
func TestCFNLint(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	if _, err := exec.LookPath("cfn-lint"); err != nil {
		t.Skip("cfn-lint is not installed")
	}
	cmd := exec.Command("cfn-lint", "--include-checks", "I", "--", "template.yaml")
	cmd.Dir = root(t)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Errorf("cfn-lint template.yaml: %v\n%s", err, out.String())
	}
}
