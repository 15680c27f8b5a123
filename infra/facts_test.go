package main

// Facts: what a CloudFormation template says about Tally's AWS layout,
// reduced to "key → value" strings that a CDK synthesis and a SAM template
// can both be read into, so that they compare line by line.
//
// Intrinsics are rendered the way Fn::Sub writes them: {"Ref": "X"} is
// "${X}", {"Fn::GetAtt": ["X", "Arn"]} is "${X.Arn}", Fn::Join and Fn::Sub
// are expanded. A Ref that names a resource attribute is written as that
// attribute (Ref of a queue is "${Q.QueueUrl}", of a state machine
// "${S.Arn}"), so !Ref and !GetAtt spellings of the same value agree.
// Conditions are evaluated with the parameters' defaults, so a value that is
// AWS::NoValue on a default deployment is absent.

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// cfnTemplate is a template as generic JSON values (map[string]any, []any,
// string, float64, bool).
type cfnTemplate struct {
	name   string
	doc    map[string]any
	dir    string            // relative paths in the template (DefinitionUri) start here
	assets map[string]string // CDK: asset object key → staged file
	errs   []string          // what could not be read
}

// newCDKTemplate reads a synthesis, its conditions evaluated with the
// parameters' defaults or the values given.
func newCDKTemplate(s *synthesis, params ...map[string]any) *cfnTemplate {
	// A copy: reading prunes the document, and the synthesis is shared.
	var doc map[string]any
	if err := json.Unmarshal([]byte(canonJSON(s.json)), &doc); err != nil {
		panic(err) // it was JSON a moment ago
	}
	setDefaults(doc, params)
	t := &cfnTemplate{name: "cdk", doc: doc, dir: s.assembly, assets: map[string]string{}}
	raw, err := os.ReadFile(filepath.Join(s.assembly, "TallyStack.assets.json"))
	if err != nil {
		t.errorf("asset manifest: %v", err)
	} else {
		var manifest struct {
			Files map[string]struct {
				Source       struct{ Path string }
				Destinations map[string]struct{ ObjectKey string }
			}
		}
		if err := json.Unmarshal(raw, &manifest); err != nil {
			t.errorf("asset manifest: %v", err)
		}
		for _, f := range manifest.Files {
			for _, d := range f.Destinations {
				t.assets[d.ObjectKey] = filepath.Join(s.assembly, f.Source.Path)
			}
		}
	}
	t.prune()
	return t
}

// setDefaults makes the values given the parameters' defaults, so that
// conditions are evaluated with them.
func setDefaults(doc map[string]any, params []map[string]any) {
	for _, ps := range params {
		for name, v := range ps {
			if p, ok := doc["Parameters"].(map[string]any)[name].(map[string]any); ok {
				p["Default"] = v
			}
		}
	}
}

// loadSAMTemplate reads a SAM (or plain CloudFormation) YAML template,
// turning short-form intrinsics (!Ref, !GetAtt, !Sub, !If, …) into their
// long form; its conditions are evaluated with the parameters' defaults or
// the values given.
func loadSAMTemplate(file string, params ...map[string]any) (*cfnTemplate, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var root yaml.Node
	if err := yaml.Unmarshal(raw, &root); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	v, err := fromYAML(&root)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	doc, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: not a mapping", file)
	}
	setDefaults(doc, params)
	t := &cfnTemplate{name: "sam", doc: doc, dir: filepath.Dir(file)}
	t.prune()
	return t, nil
}

func fromYAML(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return fromYAML(n.Content[0])
	case yaml.AliasNode:
		return fromYAML(n.Alias)
	}
	if strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!") {
		fn := n.Tag[1:]
		inner := *n
		inner.Tag = ""
		var arg any
		if n.Kind == yaml.ScalarNode {
			arg = n.Value
		} else {
			var err error
			if arg, err = fromYAML(&inner); err != nil {
				return nil, err
			}
		}
		switch fn {
		case "Ref", "Condition":
			return map[string]any{fn: arg}, nil
		case "GetAtt":
			if s, ok := arg.(string); ok {
				id, attr, _ := strings.Cut(s, ".")
				arg = []any{id, attr}
			}
		}
		return map[string]any{"Fn::" + fn: arg}, nil
	}
	switch n.Kind {
	case yaml.MappingNode:
		m := map[string]any{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			v, err := fromYAML(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			m[n.Content[i].Value] = v
		}
		return m, nil
	case yaml.SequenceNode:
		l := []any{}
		for _, c := range n.Content {
			v, err := fromYAML(c)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
		}
		return l, nil
	default:
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, err
		}
		switch x := v.(type) {
		case int:
			return float64(x), nil
		case int64:
			return float64(x), nil
		case uint64:
			return float64(x), nil
		}
		return v, nil
	}
}

func (t *cfnTemplate) errorf(format string, args ...any) {
	t.errs = append(t.errs, fmt.Sprintf(format, args...))
}

func (t *cfnTemplate) section(name string) map[string]any {
	m, _ := t.doc[name].(map[string]any)
	return m
}

func (t *cfnTemplate) resources() map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range t.section("Resources") {
		if m, ok := r.(map[string]any); ok {
			out[id] = m
		}
	}
	return out
}

func (t *cfnTemplate) typeOf(id string) string {
	r, _ := t.section("Resources")[id].(map[string]any)
	s, _ := r["Type"].(string)
	return s
}

func props(r map[string]any) map[string]any {
	p, _ := r["Properties"].(map[string]any)
	if p == nil {
		p = map[string]any{}
	}
	return p
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ---------------------------------------------------------------- conditions

type noValue struct{}

// prune evaluates conditions with the parameters' defaults: resources whose
// condition is false go, Fn::If picks its branch, AWS::NoValue disappears.
func (t *cfnTemplate) prune() {
	res := t.section("Resources")
	for id, r := range res {
		if m, ok := r.(map[string]any); ok {
			if c, ok := m["Condition"].(string); ok && !t.condition(c) {
				delete(res, id)
			}
		}
	}
	for _, s := range []string{"Globals", "Resources", "Outputs"} {
		if v, ok := t.doc[s]; ok {
			t.doc[s] = t.pruneValue(v)
		}
	}
}

func (t *cfnTemplate) pruneValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if args, ok := x["Fn::If"].([]any); ok && len(x) == 1 {
			if len(args) != 3 {
				t.errorf("Fn::If with %d arguments", len(args))
				return v
			}
			c, _ := args[0].(string)
			if t.condition(c) {
				return t.pruneValue(args[1])
			}
			return t.pruneValue(args[2])
		}
		if r, ok := x["Ref"].(string); ok && len(x) == 1 && r == "AWS::NoValue" {
			return noValue{}
		}
		out := map[string]any{}
		for k, e := range x {
			if p := t.pruneValue(e); p != (noValue{}) {
				out[k] = p
			}
		}
		return out
	case []any:
		out := []any{}
		for _, e := range x {
			if p := t.pruneValue(e); p != (noValue{}) {
				out = append(out, p)
			}
		}
		return out
	}
	return v
}

func (t *cfnTemplate) condition(name string) bool {
	c, ok := t.section("Conditions")[name]
	if !ok {
		t.errorf("unknown condition %q", name)
		return false
	}
	return t.truth(c)
}

func (t *cfnTemplate) truth(v any) bool {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		t.errorf("condition %v", v)
		return false
	}
	for fn, arg := range m {
		args, _ := arg.([]any)
		switch fn {
		case "Condition":
			s, _ := arg.(string)
			return t.condition(s)
		case "Fn::Not":
			return len(args) == 1 && !t.truth(args[0])
		case "Fn::And", "Fn::Or":
			all, any := true, false
			for _, a := range args {
				b := t.truth(a)
				all, any = all && b, any || b
			}
			if fn == "Fn::And" {
				return all
			}
			return any
		case "Fn::Equals":
			return len(args) == 2 && t.defaultValue(args[0]) == t.defaultValue(args[1])
		}
		t.errorf("condition function %s", fn)
	}
	return false
}

// defaultValue is v with parameters at their defaults, as a string.
func (t *cfnTemplate) defaultValue(v any) string {
	if m, ok := v.(map[string]any); ok {
		if r, ok := m["Ref"].(string); ok {
			if p, ok := t.section("Parameters")[r].(map[string]any); ok {
				return scalar(p["Default"])
			}
		}
	}
	return t.render(v)
}

// ---------------------------------------------------------------- rendering

// refAttrs: what Ref returns, for the types where it is an attribute.
var refAttrs = map[string]string{
	"AWS::SQS::Queue":                  "QueueUrl",
	"AWS::StepFunctions::StateMachine": "Arn",
	"AWS::Serverless::StateMachine":    "Arn",
}

func (t *cfnTemplate) refString(id string) string {
	if a, ok := refAttrs[t.typeOf(id)]; ok {
		return "${" + id + "." + a + "}"
	}
	return "${" + id + "}"
}

var subVar = regexp.MustCompile(`\$\{([^}]*)\}`)

// render writes v as a string, intrinsics in Fn::Sub syntax.
func (t *cfnTemplate) render(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string, float64, bool:
		return scalar(x)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = t.render(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		if len(x) == 1 {
			for fn, arg := range x {
				if s, ok := t.renderIntrinsic(fn, arg); ok {
					return s
				}
			}
		}
		return canonJSON(t.canon(v))
	}
	return fmt.Sprint(v)
}

func (t *cfnTemplate) renderIntrinsic(fn string, arg any) (string, bool) {
	switch fn {
	case "Ref":
		s, ok := arg.(string)
		return t.refString(s), ok
	case "Fn::GetAtt":
		switch a := arg.(type) {
		case []any:
			if len(a) == 2 {
				return "${" + t.render(a[0]) + "." + t.render(a[1]) + "}", true
			}
		case string:
			return "${" + a + "}", true
		}
	case "Fn::Join":
		a, ok := arg.([]any)
		if !ok || len(a) != 2 {
			return "", false
		}
		sep, _ := a[0].(string)
		items, ok := a[1].([]any)
		if !ok {
			return "", false
		}
		parts := make([]string, len(items))
		for i, e := range items {
			parts[i] = t.render(e)
		}
		return strings.Join(parts, sep), true
	case "Fn::Sub":
		var body string
		vars := map[string]any{}
		switch a := arg.(type) {
		case string:
			body = a
		case []any:
			if len(a) != 2 {
				return "", false
			}
			body, _ = a[0].(string)
			vars, _ = a[1].(map[string]any)
		default:
			return "", false
		}
		return subVar.ReplaceAllStringFunc(body, func(m string) string {
			name := m[2 : len(m)-1]
			switch {
			case strings.HasPrefix(name, "!"):
				return "${" + name[1:] + "}"
			case vars[name] != nil:
				return t.render(vars[name])
			case strings.Contains(name, "."):
				return m
			default:
				return t.refString(name)
			}
		}), true
	}
	return "", false
}

// canon replaces intrinsics in v by their rendering.
func (t *cfnTemplate) canon(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 1 {
			for fn, arg := range x {
				if s, ok := t.renderIntrinsic(fn, arg); ok {
					return s
				}
			}
		}
		out := map[string]any{}
		for k, e := range x {
			out[k] = t.canon(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = t.canon(e)
		}
		return out
	}
	return v
}

func scalar(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	}
	return fmt.Sprint(v)
}

func canonJSON(v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSpace(buf.String())
}

// resourceID is the logical id a rendered "${X}" or "${X.Attr}" names.
func resourceID(rendered string) string {
	if strings.HasPrefix(rendered, "${") && strings.HasSuffix(rendered, "}") && strings.Count(rendered, "${") == 1 {
		id, _, _ := strings.Cut(rendered[2:len(rendered)-1], ".")
		return id
	}
	return rendered
}

// orDefault renders v, or def when v is absent.
func (t *cfnTemplate) orDefault(v any, def string) string {
	if v == nil {
		return def
	}
	return t.render(v)
}

// ---------------------------------------------------------------- facts

// samTypes: the plain CloudFormation type a SAM resource becomes.
var samTypes = map[string]string{
	"AWS::Serverless::Function":     "AWS::Lambda::Function",
	"AWS::Serverless::HttpApi":      "AWS::ApiGatewayV2::Api",
	"AWS::Serverless::StateMachine": "AWS::StepFunctions::StateMachine",
	"AWS::Serverless::SimpleTable":  "AWS::DynamoDB::Table",
}

// namedTypes are the types whose logical ids the contract names; other
// resources (roles, routes, permissions, mappings…) are compared through
// what they do.
var namedTypes = []string{"AWS::Lambda::Function", "AWS::ApiGatewayV2::Api", "AWS::StepFunctions::StateMachine",
	"AWS::DynamoDB::Table", "AWS::SQS::Queue", "AWS::CloudWatch::Alarm", "AWS::Logs::LogGroup", "AWS::SNS::Topic", "AWS::SNS::Subscription", "AWS::KMS::Key"}

// facts reads a template's facts; what it cannot read fails the test.
func facts(tb testing.TB, t *cfnTemplate) map[string]string {
	tb.Helper()
	f := t.facts()
	for _, e := range t.errs {
		tb.Errorf("%s template: %s", t.name, e)
	}
	return f
}

func (t *cfnTemplate) facts() map[string]string {
	f := map[string]string{}
	grants := map[string]map[string]bool{} // "principal resource" → actions
	for _, id := range sortedKeys(t.resources()) {
		r := t.resources()[id]
		typ, _ := r["Type"].(string)
		if plain, ok := samTypes[typ]; ok {
			typ = plain
		}
		if slices.Contains(namedTypes, typ) {
			f["resource "+id] = typ
		}
		p := props(r)
		switch r["Type"] {
		case "AWS::Lambda::Function":
			t.functionFacts(f, id, p)
		case "AWS::Serverless::Function":
			t.samFunctionFacts(f, grants, id, p)
		case "AWS::ApiGatewayV2::Api":
			f["api "+id] = t.orDefault(p["ProtocolType"], "?")
		case "AWS::Serverless::HttpApi":
			f["api "+id] = "HTTP"
			f["api "+id+" stage"] = t.orDefault(p["StageName"], "$default") + " autodeploy=true"
			f["api "+id+" throttle"] = t.orDefault(p["DefaultRouteSettings"], "none")
			t.routeThrottleFacts(f, id, p["RouteSettings"])
			for _, k := range []string{"DefinitionBody", "DefinitionUri"} {
				if p[k] != nil {
					t.errorf("%s: routes in %s are not read; use function events", id, k)
				}
			}
		case "AWS::ApiGatewayV2::Stage":
			f["api "+resourceID(t.render(p["ApiId"]))+" stage"] = t.render(p["StageName"]) + " autodeploy=" + t.orDefault(p["AutoDeploy"], "false")
			f["api "+resourceID(t.render(p["ApiId"]))+" throttle"] = t.orDefault(p["DefaultRouteSettings"], "none")
			t.routeThrottleFacts(f, resourceID(t.render(p["ApiId"])), p["RouteSettings"])
		case "AWS::Logs::LogGroup":
			f["loggroup "+id] = "retention=" + t.orDefault(p["RetentionInDays"], "never") + " name=" + t.orDefault(p["LogGroupName"], "generated") +
				" deletion=" + t.orDefault(r["DeletionPolicy"], "Delete") + " replace=" + t.orDefault(r["UpdateReplacePolicy"], "Delete")
		case "AWS::SNS::Topic":
			f["topic "+id+" key"] = resourceID(t.orDefault(p["KmsMasterKeyId"], "none"))
		case "AWS::KMS::Key":
			t.keyFacts(f, id, p)
		case "AWS::SNS::Subscription":
			f["subscription "+id] = resourceID(t.render(p["TopicArn"])) + " " + t.render(p["Protocol"]) + " " + t.render(p["Endpoint"]) + " if " + t.orDefault(r["Condition"], "always")
		case "AWS::ApiGatewayV2::Route":
			t.routeFacts(f, p)
		case "AWS::DynamoDB::Table":
			t.tableFacts(f, id, r, p)
		case "AWS::SQS::Queue":
			f["queue "+id+" visibility"] = t.orDefault(p["VisibilityTimeout"], "30")
			f["queue "+id+" retention"] = t.orDefault(p["MessageRetentionPeriod"], "345600")
			f["queue "+id+" deletion"] = t.orDefault(r["DeletionPolicy"], "Delete") + " replace=" + t.orDefault(r["UpdateReplacePolicy"], "Delete")
			if rp, ok := p["RedrivePolicy"].(map[string]any); ok {
				f["queue "+id+" redrive"] = resourceID(t.render(rp["deadLetterTargetArn"])) + " after " + t.render(rp["maxReceiveCount"])
			}
			if p["FifoQueue"] != nil {
				f["queue "+id+" fifo"] = t.render(p["FifoQueue"])
			}
		case "AWS::StepFunctions::StateMachine", "AWS::Serverless::StateMachine":
			t.stateMachineFacts(f, grants, id, r["Type"] == "AWS::Serverless::StateMachine", p)
		case "AWS::Events::Rule":
			if p["ScheduleExpression"] != nil {
				targets, _ := p["Targets"].([]any)
				for _, tg := range targets {
					tm, _ := tg.(map[string]any)
					addFact(f, "schedule "+resourceID(t.render(tm["Arn"])), t.render(p["ScheduleExpression"])+" "+t.orDefault(p["State"], "ENABLED"))
				}
			}
		case "AWS::Scheduler::Schedule":
			target, _ := p["Target"].(map[string]any)
			addFact(f, "schedule "+resourceID(t.render(target["Arn"])), t.render(p["ScheduleExpression"])+" "+t.orDefault(p["State"], "ENABLED"))
		case "AWS::Lambda::EventSourceMapping":
			t.eventSourceFacts(f, resourceID(t.render(p["FunctionName"])), p["EventSourceArn"], p)
		case "AWS::CloudWatch::Alarm":
			t.alarmFacts(f, id, p)
		case "AWS::IAM::Policy":
			doc, _ := p["PolicyDocument"].(map[string]any)
			roles, _ := p["Roles"].([]any)
			for _, role := range roles {
				t.statementGrants(grants, t.rolePrincipal(resourceID(t.render(role))), doc["Statement"])
			}
		case "AWS::IAM::Role":
			inline, _ := p["Policies"].([]any)
			for _, pol := range inline {
				pm, _ := pol.(map[string]any)
				doc, _ := pm["PolicyDocument"].(map[string]any)
				t.statementGrants(grants, t.rolePrincipal(id), doc["Statement"])
			}
			managed, _ := p["ManagedPolicyArns"].([]any)
			for _, m := range managed {
				addGrant(grants, t.rolePrincipal(id), "managed", t.render(m))
			}
			doc, _ := p["AssumeRolePolicyDocument"].(map[string]any)
			f["role "+t.rolePrincipal(id)+" assumed by"] = t.render(doc["Statement"])
		}
	}
	for _, key := range sortedKeys(grants) {
		var actions []string
		for a := range grants[key] {
			// An unconditional grant covers the conditional one.
			if base, _, ok := strings.Cut(a, " if "); ok && grants[key][base] {
				continue
			}
			actions = append(actions, a)
		}
		sort.Strings(actions)
		f["grant "+key] = strings.Join(actions, " ")
	}
	for name, o := range t.section("Outputs") {
		om, _ := o.(map[string]any)
		f["output "+name] = t.render(om["Value"])
		if e, ok := om["Export"].(map[string]any); ok {
			f["output "+name+" export"] = t.render(e["Name"])
		}
	}
	// Parameters the compared facts use.
	for name, p := range t.section("Parameters") {
		used := false
		for _, v := range f {
			used = used || strings.Contains(v, "${"+name+"}")
		}
		if !used {
			continue
		}
		pm, _ := p.(map[string]any)
		var parts []string
		for _, k := range []string{"Type", "Default", "MinValue", "MaxValue", "AllowedValues", "AllowedPattern"} {
			if pm[k] != nil {
				parts = append(parts, k+"="+t.render(pm[k]))
			}
		}
		f["parameter "+name] = strings.Join(parts, " ")
	}
	return f
}

// addFact adds value to a fact that may have several (sorted, "; ").
func addFact(f map[string]string, key, value string) {
	if old, ok := f[key]; ok {
		values := append(strings.Split(old, "; "), value)
		sort.Strings(values)
		value = strings.Join(values, "; ")
	}
	f[key] = value
}

func (t *cfnTemplate) functionFacts(f map[string]string, id string, p map[string]any) {
	fn := "function " + id
	f[fn+" runtime"] = t.render(p["Runtime"])
	f[fn+" architectures"] = t.orDefault(p["Architectures"], "[x86_64]")
	f[fn+" handler"] = t.render(p["Handler"])
	f[fn+" memory"] = t.orDefault(p["MemorySize"], "128")
	f[fn+" timeout"] = t.orDefault(p["Timeout"], "3")
	logging, _ := p["LoggingConfig"].(map[string]any)
	f[fn+" logs"] = t.orDefault(logging["LogGroup"], "/aws/lambda/<name>")
	f[fn+" log format"] = t.orDefault(logging["LogFormat"], "Text")
	f[fn+" system log level"] = t.orDefault(logging["SystemLogLevel"], "INFO")
	f[fn+" reserved"] = t.orDefault(p["ReservedConcurrentExecutions"], "unreserved")
	env, _ := p["Environment"].(map[string]any)
	vars, _ := env["Variables"].(map[string]any)
	var names []string
	for name, v := range vars {
		f[fn+" env "+name] = t.render(v)
		names = append(names, name)
	}
	sort.Strings(names)
	f[fn+" env"] = strings.Join(names, " ")
}

// samFunctionFacts reads an AWS::Serverless::Function: Globals, defaults,
// its events (routes, schedules, event sources) and its policies.
func (t *cfnTemplate) samFunctionFacts(f map[string]string, grants map[string]map[string]bool, id string, p map[string]any) {
	globals, _ := t.section("Globals")["Function"].(map[string]any)
	merged := map[string]any{}
	for k, v := range globals {
		merged[k] = v
	}
	for k, v := range p {
		merged[k] = v
	}
	// Environment variables merge key by key.
	vars := map[string]any{}
	for _, src := range []map[string]any{globals, p} {
		env, _ := src["Environment"].(map[string]any)
		vs, _ := env["Variables"].(map[string]any)
		for k, v := range vs {
			vars[k] = v
		}
	}
	merged["Environment"] = map[string]any{"Variables": vars}
	t.functionFacts(f, id, merged)

	events, _ := p["Events"].(map[string]any)
	for _, name := range sortedKeys(events) {
		ev, _ := events[name].(map[string]any)
		ep, _ := ev["Properties"].(map[string]any)
		switch ev["Type"] {
		case "HttpApi":
			api := "ServerlessHttpApi"
			if ep["ApiId"] != nil {
				api = resourceID(t.render(ep["ApiId"]))
			}
			method := strings.ToUpper(t.orDefault(ep["Method"], "ANY"))
			if method == "X-AMAZON-APIGATEWAY-ANY-METHOD" {
				method = "ANY"
			}
			// An event with no Path (nor Method), or with Path $default, is
			// the $default route, whatever its method.
			key := method + " " + t.render(ep["Path"])
			if ep["Path"] == nil || ep["Path"] == "$default" {
				key = "$default"
			}
			f["route "+key] = fmt.Sprintf("api=%s function=%s payload=%s", api, id, t.orDefault(ep["PayloadFormatVersion"], "2.0"))
		case "Schedule":
			state := "ENABLED"
			if ep["Enabled"] == false {
				state = "DISABLED"
			}
			if ep["State"] != nil {
				state = t.render(ep["State"])
			}
			addFact(f, "schedule "+id, t.render(ep["Schedule"])+" "+state)
		case "ScheduleV2":
			addFact(f, "schedule "+id, t.render(ep["ScheduleExpression"])+" "+t.orDefault(ep["State"], "ENABLED"))
		case "DynamoDB", "Kinesis":
			t.eventSourceFacts(f, id, ep["Stream"], ep)
			t.destinationGrant(grants, id, ep)
		case "SQS":
			t.eventSourceFacts(f, id, ep["Queue"], ep)
		default:
			t.errorf("%s: event %s of type %v is not read", id, name, ev["Type"])
		}
	}
	if p["Role"] != nil && p["Policies"] != nil {
		t.errorf("%s: Policies next to a Role are not read", id)
	}
	t.samPolicies(grants, id, p["Policies"])
}

// destinationGrant: SAM lets a function send to its stream event's
// on-failure destination.
func (t *cfnTemplate) destinationGrant(grants map[string]map[string]bool, id string, ep map[string]any) {
	dc, _ := ep["DestinationConfig"].(map[string]any)
	of, _ := dc["OnFailure"].(map[string]any)
	if of == nil {
		return
	}
	dest := resourceID(t.render(of["Destination"]))
	switch of["Type"] {
	case "SQS":
		addGrant(grants, id, dest, "sqs:SendMessage")
	case "SNS":
		addGrant(grants, id, dest, "sns:Publish")
	}
}

// samPolicyTemplates: the SAM policy templates the template may use, by the
// actions (of those compared) they grant and the resources, relative to
// their one parameter.
var samPolicyTemplates = map[string]struct {
	param     string
	actions   []string
	resources []string // "" is the resource itself
}{
	"DynamoDBCrudPolicy": {"TableName", []string{"dynamodb:GetItem", "dynamodb:DeleteItem", "dynamodb:PutItem", "dynamodb:Scan",
		"dynamodb:Query", "dynamodb:UpdateItem", "dynamodb:BatchWriteItem", "dynamodb:BatchGetItem", "dynamodb:DescribeTable",
		"dynamodb:ConditionCheckItem"}, []string{"", "/index"}},
	"DynamoDBReadPolicy": {"TableName", []string{"dynamodb:GetItem", "dynamodb:Scan", "dynamodb:Query", "dynamodb:BatchGetItem",
		"dynamodb:DescribeTable"}, []string{"", "/index"}},
	"DynamoDBWritePolicy": {"TableName", []string{"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:BatchWriteItem"},
		[]string{"", "/index"}},
	"SQSSendMessagePolicy":         {"QueueName", []string{"sqs:SendMessage*"}, []string{""}},
	"SQSPollerPolicy":              {"QueueName", []string{"sqs:ReceiveMessage", "sqs:DeleteMessage"}, []string{""}},
	"StepFunctionsExecutionPolicy": {"StateMachineName", []string{"states:StartExecution"}, []string{""}},
	"LambdaInvokePolicy":           {"FunctionName", []string{"lambda:InvokeFunction"}, []string{""}},
}

func (t *cfnTemplate) samPolicies(grants map[string]map[string]bool, principal string, policies any) {
	list, ok := policies.([]any)
	if !ok && policies != nil {
		list = []any{policies}
	}
	for _, pol := range list {
		switch x := pol.(type) {
		case string:
			if x != "AWSLambdaBasicExecutionRole" {
				addGrant(grants, principal, "managed", x)
			}
		case map[string]any:
			if st, ok := x["Statement"]; ok {
				t.statementGrants(grants, principal, st)
				continue
			}
			for name, arg := range x {
				tmpl, ok := samPolicyTemplates[name]
				if !ok {
					t.errorf("%s: policy template %s is not known to the parity test", principal, name)
					continue
				}
				am, _ := arg.(map[string]any)
				res := resourceID(t.render(am[tmpl.param]))
				for _, suffix := range tmpl.resources {
					for _, a := range tmpl.actions {
						for _, c := range matchCapabilities(a) {
							addGrant(grants, principal, res+suffix, c)
						}
					}
				}
			}
		default:
			t.errorf("%s: policy %v", principal, pol)
		}
	}
}

// rolePrincipal is the function or state machine a role belongs to (the
// role itself when none).
func (t *cfnTemplate) rolePrincipal(role string) string {
	want := "${" + role + ".Arn}"
	for id, r := range t.resources() {
		p := props(r)
		switch r["Type"] {
		case "AWS::Lambda::Function", "AWS::Serverless::Function", "AWS::Serverless::StateMachine":
			if t.render(p["Role"]) == want {
				return id
			}
		case "AWS::StepFunctions::StateMachine":
			if t.render(p["RoleArn"]) == want {
				return id
			}
		}
	}
	return role
}

// matchCapabilities are the actions an action pattern of a SAM policy
// template grants, from those compared; the SAM template names its actions
// one by one, so this is only for templates the tests write.
func matchCapabilities(pattern string) []string {
	known := []string{"dynamodb:BatchGetItem", "dynamodb:BatchWriteItem", "dynamodb:ConditionCheckItem", "dynamodb:DeleteItem",
		"dynamodb:DescribeTable", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query", "dynamodb:Scan", "dynamodb:UpdateItem",
		"sqs:SendMessage", "sqs:ReceiveMessage", "sqs:DeleteMessage", "states:StartExecution", "lambda:InvokeFunction"}
	var out []string
	for _, c := range known {
		if ok, _ := path.Match(strings.ToLower(pattern), strings.ToLower(c)); ok {
			out = append(out, c)
		}
	}
	return out
}

func addGrant(grants map[string]map[string]bool, principal, resource, action string) {
	key := principal + " " + resource
	if grants[key] == nil {
		grants[key] = map[string]bool{}
	}
	grants[key][action] = true
}

func (t *cfnTemplate) statementGrants(grants map[string]map[string]bool, principal string, statements any) {
	list, ok := statements.([]any)
	if !ok && statements != nil {
		list = []any{statements}
	}
	for _, s := range list {
		st, _ := s.(map[string]any)
		if st["Effect"] != "Allow" {
			t.errorf("%s: statement with effect %v", principal, st["Effect"])
			continue
		}
		var actions, resources []any
		for k, dst := range map[string]*[]any{"Action": &actions, "Resource": &resources} {
			switch v := st[k].(type) {
			case []any:
				*dst = v
			case nil:
				t.errorf("%s: statement without %s", principal, k)
			default:
				*dst = []any{v}
			}
		}
		cond := ""
		if st["Condition"] != nil {
			cond = " if " + canonJSON(t.canon(st["Condition"]))
		}
		for _, r := range resources {
			res := t.grantResource(t.render(r))
			for _, a := range actions {
				addGrant(grants, principal, res, t.render(a)+cond) // every action, as written
			}
		}
	}
}

var (
	arnResource  = regexp.MustCompile(`^\$\{([A-Za-z0-9]+)\.(Arn|StreamArn)\}(.*)$`)
	executionARN = regexp.MustCompile(`^arn:\$\{AWS::Partition\}:states:\$\{AWS::Region\}:\$\{AWS::AccountId\}:execution:\$\{([A-Za-z0-9]+)\.Name\}:\*$`)
)

// grantResource names the resource of a rendered ARN: "Table",
// "Table/index", "Table/stream", "AttemptFunction" (versions included), "*".
func (t *cfnTemplate) grantResource(arn string) string {
	if m := arnResource.FindStringSubmatch(arn); m != nil {
		id, attr, rest := m[1], m[2], m[3]
		switch {
		case attr == "StreamArn" && rest == "", rest == "/stream/*":
			return id + "/stream"
		case rest == "/index/*":
			return id + "/index"
		case rest == "" || rest == ":*":
			return id
		}
	}
	if m := executionARN.FindStringSubmatch(arn); m != nil {
		return m[1] + "/executions"
	}
	if id := resourceID(arn); id != arn && !strings.Contains(id, "::") {
		return id // "${StateMachine.Arn}" written as Ref
	}
	return arn
}

// routeThrottleFacts adds the throttling of each route that has settings
// of its own (a stage's RouteSettings, keyed by route key).
func (t *cfnTemplate) routeThrottleFacts(f map[string]string, api string, settings any) {
	m, _ := settings.(map[string]any)
	for key, v := range m {
		f["api "+api+" throttle "+key] = t.render(v)
	}
}

func (t *cfnTemplate) routeFacts(f map[string]string, p map[string]any) {
	key := t.render(p["RouteKey"])
	api := resourceID(t.render(p["ApiId"]))
	target := t.render(p["Target"])
	integrationID, ok := strings.CutPrefix(target, "integrations/")
	if !ok {
		t.errorf("route %s: target %s", key, target)
		return
	}
	integration := props(t.resources()[resourceID(integrationID)])
	function := resourceID(t.render(integration["IntegrationUri"]))
	if integration["IntegrationType"] != "AWS_PROXY" {
		function += " (" + t.render(integration["IntegrationType"]) + ")"
	}
	f["route "+key] = fmt.Sprintf("api=%s function=%s payload=%s", api, function, t.orDefault(integration["PayloadFormatVersion"], "1.0"))
}

func (t *cfnTemplate) tableFacts(f map[string]string, id string, r, p map[string]any) {
	tb := "table " + id
	types := map[string]string{}
	defs, _ := p["AttributeDefinitions"].([]any)
	for _, d := range defs {
		dm, _ := d.(map[string]any)
		types[t.render(dm["AttributeName"])] = t.render(dm["AttributeType"])
	}
	keys := func(schema any) string {
		list, _ := schema.([]any)
		var parts []string
		for _, k := range list {
			km, _ := k.(map[string]any)
			name := t.render(km["AttributeName"])
			parts = append(parts, name+":"+types[name]+" "+t.render(km["KeyType"]))
		}
		return strings.Join(parts, ", ")
	}
	f[tb+" keys"] = keys(p["KeySchema"])
	f[tb+" billing"] = t.orDefault(p["BillingMode"], "PROVISIONED")
	f[tb+" warm"] = t.orDefault(p["WarmThroughput"], "none")
	for _, k := range []string{"GlobalSecondaryIndexes", "LocalSecondaryIndexes"} {
		list, _ := p[k].([]any)
		for _, i := range list {
			im, _ := i.(map[string]any)
			proj, _ := im["Projection"].(map[string]any)
			value := keys(im["KeySchema"]) + "; projection " + t.render(proj["ProjectionType"])
			if proj["NonKeyAttributes"] != nil {
				value += " " + t.render(proj["NonKeyAttributes"])
			}
			if im["WarmThroughput"] != nil {
				value += "; warm " + t.render(im["WarmThroughput"])
			}
			f[tb+" index "+t.render(im["IndexName"])] = value
		}
	}
	if ttl, ok := p["TimeToLiveSpecification"].(map[string]any); ok {
		f[tb+" ttl"] = t.render(ttl["AttributeName"]) + " enabled=" + t.render(ttl["Enabled"])
	}
	if s, ok := p["StreamSpecification"].(map[string]any); ok {
		f[tb+" stream"] = t.render(s["StreamViewType"])
	}
	pitr, _ := p["PointInTimeRecoverySpecification"].(map[string]any)
	f[tb+" pitr"] = t.orDefault(pitr["PointInTimeRecoveryEnabled"], "false")
	f[tb+" deletion policy"] = t.orDefault(r["DeletionPolicy"], "Delete")
	f[tb+" deletion protection"] = t.orDefault(p["DeletionProtectionEnabled"], "false")
	if p["SSESpecification"] != nil {
		f[tb+" sse"] = t.render(p["SSESpecification"])
	}
}

func (t *cfnTemplate) stateMachineFacts(f map[string]string, grants map[string]map[string]bool, id string, sam bool, p map[string]any) {
	sm := "statemachine " + id
	f[sm+" type"] = t.orDefault(p["StateMachineType"], "STANDARD")
	var def []byte
	switch {
	case sam && p["DefinitionUri"] != nil:
		uri, ok := p["DefinitionUri"].(string)
		if !ok {
			t.errorf("%s: DefinitionUri %v is not a local file", id, p["DefinitionUri"])
			break
		}
		var err error
		if def, err = os.ReadFile(filepath.Join(t.dir, uri)); err != nil {
			t.errorf("%s: %v", id, err)
		}
	case p["Definition"] != nil:
		def = []byte(canonJSON(p["Definition"]))
	case p["DefinitionString"] != nil:
		s, ok := p["DefinitionString"].(string)
		if !ok {
			t.errorf("%s: DefinitionString is not a literal", id)
		}
		def = []byte(s)
	case p["DefinitionS3Location"] != nil:
		loc, _ := p["DefinitionS3Location"].(map[string]any)
		file, ok := t.assets[t.render(loc["Key"])]
		if !ok {
			t.errorf("%s: definition %s is not a staged asset", id, t.render(loc["Key"]))
			break
		}
		var err error
		if def, err = os.ReadFile(file); err != nil {
			t.errorf("%s: %v", id, err)
		}
	default:
		t.errorf("%s: no definition", id)
	}
	if def != nil {
		var v any
		if err := json.Unmarshal(def, &v); err != nil {
			t.errorf("%s: definition: %v", id, err)
		}
		states, _ := v.(map[string]any)["States"].(map[string]any)
		f[sm+" definition"] = fmt.Sprintf("sha256:%x (%d states)", sha256.Sum256([]byte(canonJSON(v))), len(states))
	}
	subs, _ := p["DefinitionSubstitutions"].(map[string]any)
	for k, v := range subs {
		f[sm+" substitution "+k] = t.render(v)
	}
	if sam {
		if typ, _ := p["Type"].(string); typ != "" {
			f[sm+" type"] = typ
		}
		if p["Role"] != nil && p["Policies"] != nil {
			t.errorf("%s: Policies next to a Role are not read", id)
		}
		t.samPolicies(grants, id, p["Policies"])
		if p["Events"] != nil {
			t.errorf("%s: state machine events are not read", id)
		}
	}
}

// keyFacts: a KMS key's rotation and the services its policy lets use it,
// with what.
func (t *cfnTemplate) keyFacts(f map[string]string, id string, p map[string]any) {
	f["key "+id+" rotation"] = t.orDefault(p["EnableKeyRotation"], "false")
	doc, _ := p["KeyPolicy"].(map[string]any)
	stmts, _ := doc["Statement"].([]any)
	for _, st := range stmts {
		sm, _ := st.(map[string]any)
		principal, _ := sm["Principal"].(map[string]any)
		if service, ok := principal["Service"]; ok {
			actions, ok := sm["Action"].([]any)
			if !ok {
				actions = []any{sm["Action"]}
			}
			var names []string
			for _, a := range actions {
				names = append(names, t.render(a))
			}
			sort.Strings(names)
			addFact(f, "key "+id+" service "+t.render(service), t.render(sm["Effect"])+" "+strings.Join(names, " "))
		}
	}
}

// eventSourceFacts: one event source mapping's settings, with the
// defaults of AWS::Lambda::EventSourceMapping made explicit.
func (t *cfnTemplate) eventSourceFacts(f map[string]string, function string, source any, p map[string]any) {
	src := t.render(source)
	kind := t.typeOf(resourceID(src))
	batch := "100"
	if kind == "AWS::SQS::Queue" {
		batch = "10"
	}
	parts := []string{
		"batch=" + t.orDefault(p["BatchSize"], batch),
		"window=" + t.orDefault(p["MaximumBatchingWindowInSeconds"], "0"),
		"enabled=" + t.orDefault(p["Enabled"], "true"),
	}
	if kind != "AWS::SQS::Queue" {
		parts = append(parts,
			"start="+t.render(p["StartingPosition"]),
			"bisect="+t.orDefault(p["BisectBatchOnFunctionError"], "false"),
			"retries="+t.orDefault(p["MaximumRetryAttempts"], "-1"),
			"maxage="+t.orDefault(p["MaximumRecordAgeInSeconds"], "-1"),
			"parallel="+t.orDefault(p["ParallelizationFactor"], "1"))
	}
	var responses []string
	rt, _ := p["FunctionResponseTypes"].([]any)
	for _, r := range rt {
		responses = append(responses, t.render(r))
	}
	sort.Strings(responses)
	parts = append(parts, "responses="+strings.Join(responses, ","))
	if dc, ok := p["DestinationConfig"].(map[string]any); ok {
		of, _ := dc["OnFailure"].(map[string]any)
		parts = append(parts, "onfailure="+resourceID(t.render(of["Destination"])))
	}
	if fc, ok := p["FilterCriteria"].(map[string]any); ok {
		filters, _ := fc["Filters"].([]any)
		var patterns []string
		for _, fl := range filters {
			fm, _ := fl.(map[string]any)
			var v any
			if err := json.Unmarshal([]byte(t.render(fm["Pattern"])), &v); err != nil {
				t.errorf("%s: filter pattern: %v", function, err)
			}
			patterns = append(patterns, canonJSON(v))
		}
		sort.Strings(patterns)
		parts = append(parts, "filters="+strings.Join(patterns, ","))
	}
	for _, k := range []string{"ScalingConfig", "TumblingWindowInSeconds", "MetricsConfig", "ProvisionedPollerConfig"} {
		if p[k] != nil {
			parts = append(parts, k+"="+t.render(p[k]))
		}
	}
	addFact(f, "eventsource "+function+" "+src, strings.Join(parts, " "))
}

func (t *cfnTemplate) alarmFacts(f map[string]string, id string, p map[string]any) {
	var dims []string
	list, _ := p["Dimensions"].([]any)
	for _, d := range list {
		dm, _ := d.(map[string]any)
		dims = append(dims, t.render(dm["Name"])+"="+t.render(dm["Value"]))
	}
	sort.Strings(dims)
	parts := []string{
		t.render(p["Namespace"]) + " " + t.render(p["MetricName"]) + " [" + strings.Join(dims, ",") + "]",
		"statistic=" + t.orDefault(p["Statistic"], t.render(p["ExtendedStatistic"])),
		"period=" + t.render(p["Period"]),
		"evaluations=" + t.render(p["EvaluationPeriods"]),
		"datapoints=" + t.orDefault(p["DatapointsToAlarm"], t.render(p["EvaluationPeriods"])),
		t.render(p["ComparisonOperator"]) + " " + t.render(p["Threshold"]),
		"missing=" + t.orDefault(p["TreatMissingData"], "missing"),
	}
	if p["Metrics"] != nil {
		parts = append(parts, "metrics="+t.render(p["Metrics"]))
	}
	for _, k := range []string{"AlarmActions", "OKActions", "InsufficientDataActions"} {
		if p[k] != nil {
			parts = append(parts, k+"="+t.render(p[k]))
		}
	}
	f["alarm "+id] = strings.Join(parts, " ")
}

// diffFacts lists every key whose value differs between a and b.
func diffFacts(a, b map[string]string, nameA, nameB string) []string {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	var out []string
	for _, k := range sortedKeys(keys) {
		va, inA := a[k]
		vb, inB := b[k]
		switch {
		case !inA:
			out = append(out, fmt.Sprintf("%s: only in %s: %s", k, nameB, vb))
		case !inB:
			out = append(out, fmt.Sprintf("%s: only in %s: %s", k, nameA, va))
		case va != vb:
			out = append(out, fmt.Sprintf("%s:\n\t%s: %s\n\t%s: %s", k, nameA, va, nameB, vb))
		}
	}
	return out
}
