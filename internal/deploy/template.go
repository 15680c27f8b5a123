package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Intrinsic is a CloudFormation intrinsic function call, from its short
// form (!GetAtt Table.Arn) or its long form ({"Fn::GetAtt": ["Table", "Arn"]}).
type Intrinsic struct {
	// Fn is the function's long name: "Ref", "Fn::GetAtt", "Fn::Sub",
	// "Fn::If", "Condition", …
	Fn string
	// Arg is the argument as written, except that Fn::GetAtt's is always
	// []any{resource, attribute}.
	Arg any
}

// Ref is {"Ref": name}.
func Ref(name string) Intrinsic { return Intrinsic{Fn: "Ref", Arg: name} }

// GetAtt is {"Fn::GetAtt": [resource, attribute]}.
func GetAtt(resource, attribute string) Intrinsic {
	return Intrinsic{Fn: "Fn::GetAtt", Arg: []any{resource, attribute}}
}

// Sub is {"Fn::Sub": s}.
func Sub(s string) Intrinsic { return Intrinsic{Fn: "Fn::Sub", Arg: s} }

// String renders the call in YAML's short form.
func (i Intrinsic) String() string {
	short := "!" + strings.TrimPrefix(i.Fn, "Fn::")
	switch arg := i.Arg.(type) {
	case string:
		return short + " " + arg
	case []any:
		if i.Fn == "Fn::GetAtt" && len(arg) == 2 {
			return fmt.Sprintf("%s %v.%v", short, arg[0], arg[1])
		}
	}
	return fmt.Sprintf("%s %v", short, i.Arg)
}

// shortForms maps YAML tags to intrinsic functions.
var shortForms = map[string]string{
	"!Ref":          "Ref",
	"!Condition":    "Condition",
	"!GetAtt":       "Fn::GetAtt",
	"!Sub":          "Fn::Sub",
	"!Join":         "Fn::Join",
	"!Select":       "Fn::Select",
	"!Split":        "Fn::Split",
	"!If":           "Fn::If",
	"!Not":          "Fn::Not",
	"!Equals":       "Fn::Equals",
	"!And":          "Fn::And",
	"!Or":           "Fn::Or",
	"!FindInMap":    "Fn::FindInMap",
	"!Base64":       "Fn::Base64",
	"!Cidr":         "Fn::Cidr",
	"!GetAZs":       "Fn::GetAZs",
	"!ImportValue":  "Fn::ImportValue",
	"!Transform":    "Fn::Transform",
	"!ToJsonString": "Fn::ToJsonString",
	"!Length":       "Fn::Length",
}

// Template is a parsed CloudFormation or SAM template.
type Template struct {
	FormatVersion string
	Transform     any
	Description   string
	Parameters    map[string]Parameter
	Conditions    map[string]any
	// Globals is SAM's Globals section as written ("Function", "HttpApi", …).
	Globals   map[string]map[string]any
	Resources map[string]Resource
	Outputs   map[string]Output
}

// Parameter is a template parameter.
type Parameter struct {
	Type    string
	Default any
	// Properties is the whole declaration (MinValue, Description, …).
	Properties map[string]any
}

// Resource is a template resource.
type Resource struct {
	Type                string
	Properties          map[string]any
	Metadata            map[string]any
	Condition           string
	DependsOn           any
	DeletionPolicy      string
	UpdateReplacePolicy string
}

// Output is a template output.
type Output struct {
	Description string
	Value       any
	Condition   string
	Export      any
}

// Load reads and parses the template at path.
func Load(path string) (*Template, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Parse parses a template in YAML or JSON. Values are maps (map[string]any),
// lists ([]any), strings, ints, float64s, bools, nil and Intrinsic.
func Parse(data []byte) (*Template, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	v, err := decode(&doc)
	if err != nil {
		return nil, err
	}
	top, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("template is not a mapping")
	}
	t := &Template{
		Parameters: map[string]Parameter{},
		Conditions: map[string]any{},
		Globals:    map[string]map[string]any{},
		Resources:  map[string]Resource{},
		Outputs:    map[string]Output{},
	}
	t.FormatVersion, _ = top["AWSTemplateFormatVersion"].(string)
	t.Transform = top["Transform"]
	t.Description, _ = top["Description"].(string)
	if c, ok := top["Conditions"].(map[string]any); ok {
		t.Conditions = c
	}
	for name, p := range mapAt(top, "Parameters") {
		pm, ok := p.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("parameter %s is not a mapping", name)
		}
		typ, _ := pm["Type"].(string)
		t.Parameters[name] = Parameter{Type: typ, Default: pm["Default"], Properties: pm}
	}
	for section, g := range mapAt(top, "Globals") {
		gm, ok := g.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("globals %s is not a mapping", section)
		}
		t.Globals[section] = gm
	}
	for id, r := range mapAt(top, "Resources") {
		rm, ok := r.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("resource %s is not a mapping", id)
		}
		res := Resource{Properties: mapAt(rm, "Properties"), Metadata: mapAt(rm, "Metadata"), DependsOn: rm["DependsOn"]}
		res.Type, _ = rm["Type"].(string)
		res.Condition, _ = rm["Condition"].(string)
		res.DeletionPolicy, _ = rm["DeletionPolicy"].(string)
		res.UpdateReplacePolicy, _ = rm["UpdateReplacePolicy"].(string)
		if res.Type == "" {
			return nil, fmt.Errorf("resource %s has no Type", id)
		}
		t.Resources[id] = res
	}
	for id, o := range mapAt(top, "Outputs") {
		om, ok := o.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("output %s is not a mapping", id)
		}
		out := Output{Value: om["Value"], Export: om["Export"]}
		out.Description, _ = om["Description"].(string)
		out.Condition, _ = om["Condition"].(string)
		t.Outputs[id] = out
	}
	return t, nil
}

// mapAt returns m[key] as a mapping, or an empty one.
func mapAt(m map[string]any, key string) map[string]any {
	if v, ok := m[key].(map[string]any); ok {
		return v
	}
	return map[string]any{}
}

func decode(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return decode(n.Content[0])
	case yaml.AliasNode:
		return decode(n.Alias)
	}
	if fn, ok := shortForms[n.Tag]; ok {
		arg, err := decodeUntagged(n)
		if err != nil {
			return nil, err
		}
		return intrinsic(fn, arg, n)
	}
	if strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!") {
		return nil, fmt.Errorf("line %d: unknown tag %s", n.Line, n.Tag)
	}
	return decodeUntagged(n)
}

func decodeUntagged(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: mapping key is not a scalar", k.Line)
			}
			if k.Value == "<<" {
				return nil, fmt.Errorf("line %d: merge keys are not supported", k.Line)
			}
			if _, dup := m[k.Value]; dup {
				return nil, fmt.Errorf("line %d: duplicate key %q", k.Line, k.Value)
			}
			v, err := decode(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			m[k.Value] = v
		}
		if len(m) == 1 {
			for k, v := range m {
				if k == "Ref" || strings.HasPrefix(k, "Fn::") {
					return intrinsic(k, v, n)
				}
			}
		}
		return m, nil
	case yaml.SequenceNode:
		l := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := decode(c)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
		}
		return l, nil
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!int", "!!float", "!!bool", "!!null":
			var v any
			if err := n.Decode(&v); err != nil {
				return nil, fmt.Errorf("line %d: %w", n.Line, err)
			}
			return v, nil
		}
		// Strings, timestamps (kept as written) and tagged scalars.
		return n.Value, nil
	}
	return nil, fmt.Errorf("line %d: unexpected YAML node", n.Line)
}

func intrinsic(fn string, arg any, n *yaml.Node) (any, error) {
	if fn == "Fn::GetAtt" {
		switch a := arg.(type) {
		case string:
			res, attr, ok := strings.Cut(a, ".")
			if !ok {
				return nil, fmt.Errorf("line %d: Fn::GetAtt %q is not Resource.Attribute", n.Line, a)
			}
			arg = []any{res, attr}
		case []any:
			if len(a) != 2 {
				return nil, fmt.Errorf("line %d: Fn::GetAtt takes [resource, attribute]", n.Line)
			}
		default:
			return nil, fmt.Errorf("line %d: Fn::GetAtt takes [resource, attribute]", n.Line)
		}
	}
	return Intrinsic{Fn: fn, Arg: arg}, nil
}

// ---------------------------------------------------------------- resolving

// noValue marks a value that resolves to AWS::NoValue.
type noValue struct{}

// Resolve returns v with every Fn::If decided and every AWS::NoValue left
// out (from mappings and lists), deciding conditions with the parameters'
// defaults overridden by params. Other intrinsics stay as they are.
func (t *Template) Resolve(v any, params map[string]string) (any, error) {
	r, err := t.resolve(v, params)
	if _, ok := r.(noValue); ok {
		return nil, err
	}
	return r, err
}

func (t *Template) resolve(v any, params map[string]string) (any, error) {
	switch x := v.(type) {
	case Intrinsic:
		switch {
		case x.Fn == "Ref" && x.Arg == "AWS::NoValue":
			return noValue{}, nil
		case x.Fn == "Fn::If":
			args, ok := x.Arg.([]any)
			if !ok || len(args) != 3 {
				return nil, fmt.Errorf("Fn::If takes [condition, then, else]: %v", x.Arg)
			}
			name, ok := args[0].(string)
			if !ok {
				return nil, fmt.Errorf("Fn::If's condition is not a name: %v", args[0])
			}
			yes, err := t.Condition(name, params)
			if err != nil {
				return nil, err
			}
			if yes {
				return t.resolve(args[1], params)
			}
			return t.resolve(args[2], params)
		}
		return x, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			r, err := t.resolve(e, params)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			if _, ok := r.(noValue); !ok {
				out[k] = r
			}
		}
		return out, nil
	case []any:
		out := make([]any, 0, len(x))
		for _, e := range x {
			r, err := t.resolve(e, params)
			if err != nil {
				return nil, err
			}
			if _, ok := r.(noValue); !ok {
				out = append(out, r)
			}
		}
		return out, nil
	}
	return v, nil
}

// Condition decides the named condition with the parameters' defaults
// overridden by params. It knows Fn::Equals, Fn::Not, Fn::And, Fn::Or and
// Condition over literals and parameter references.
func (t *Template) Condition(name string, params map[string]string) (bool, error) {
	c, ok := t.Conditions[name]
	if !ok {
		return false, fmt.Errorf("no condition %s", name)
	}
	b, err := t.condition(c, params, 0)
	if err != nil {
		return false, fmt.Errorf("condition %s: %w", name, err)
	}
	return b, nil
}

func (t *Template) condition(v any, params map[string]string, depth int) (bool, error) {
	if depth > 32 {
		return false, errors.New("conditions nest too deep (a cycle?)")
	}
	if m, ok := v.(map[string]any); ok && len(m) == 1 {
		if name, ok := m["Condition"].(string); ok {
			v = Intrinsic{Fn: "Condition", Arg: name}
		}
	}
	x, ok := v.(Intrinsic)
	if !ok {
		return false, fmt.Errorf("not a condition function: %v", v)
	}
	args, _ := x.Arg.([]any)
	switch x.Fn {
	case "Condition":
		name, _ := x.Arg.(string)
		c, ok := t.Conditions[name]
		if !ok {
			return false, fmt.Errorf("no condition %s", name)
		}
		return t.condition(c, params, depth+1)
	case "Fn::Equals":
		if len(args) != 2 {
			return false, errors.New("Fn::Equals takes two values")
		}
		a, err := t.scalar(args[0], params)
		if err != nil {
			return false, err
		}
		b, err := t.scalar(args[1], params)
		if err != nil {
			return false, err
		}
		return a == b, nil
	case "Fn::Not":
		if len(args) != 1 {
			return false, errors.New("Fn::Not takes one condition")
		}
		b, err := t.condition(args[0], params, depth+1)
		return !b, err
	case "Fn::And", "Fn::Or":
		and := x.Fn == "Fn::And"
		for _, a := range args {
			b, err := t.condition(a, params, depth+1)
			if err != nil {
				return false, err
			}
			if b != and {
				return b, nil
			}
		}
		return and, nil
	}
	return false, fmt.Errorf("cannot decide %s", x.Fn)
}

// scalar is a literal or a parameter's value, as a string.
func (t *Template) scalar(v any, params map[string]string) (string, error) {
	if x, ok := v.(Intrinsic); ok {
		name, _ := x.Arg.(string)
		if x.Fn != "Ref" {
			return "", fmt.Errorf("cannot decide %v", x)
		}
		if s, ok := params[name]; ok {
			return s, nil
		}
		p, ok := t.Parameters[name]
		if !ok {
			return "", fmt.Errorf("cannot decide %v: not a parameter", x)
		}
		if p.Default == nil {
			return "", fmt.Errorf("parameter %s has no default", name)
		}
		return fmt.Sprint(p.Default), nil
	}
	switch v.(type) {
	case string, int, float64, bool:
		return fmt.Sprint(v), nil
	}
	return "", fmt.Errorf("not a scalar: %v", v)
}

// ---------------------------------------------------------------- functions

// Function is an AWS::Serverless::Function with the Globals applied.
type Function struct {
	LogicalID     string
	CodeURI       any
	BuildMethod   string // Metadata.BuildMethod ("makefile", …)
	Runtime       string
	Handler       string
	Architectures []string
	MemorySize    int
	Timeout       int
	Description   string
	// Environment is the environment as deployed with the parameters'
	// defaults: Fn::If decided, variables that resolve to AWS::NoValue left
	// out. Values are strings, numbers or Intrinsic.
	Environment map[string]any
	// DeclaredEnvironment names every variable the template declares for
	// the function, whatever its conditions: the ones
	// `sam local --env-vars` can set (SAM CLI ignores the others).
	DeclaredEnvironment []string
	Policies            []Policy
	Events              map[string]Event
	// LogGroup is LoggingConfig.LogGroup: the function's log group.
	LogGroup any
	// Role is the function's execution role (!GetAtt <Role>.Arn), when the
	// template gives one instead of SAM's generated role and Policies.
	Role any
	// ReservedConcurrency is ReservedConcurrentExecutions; 0 when not set.
	ReservedConcurrency int
	// Properties is every property, with the Globals merged in.
	Properties map[string]any
}

// Event is one entry of a function's Events.
type Event struct {
	Name       string
	Type       string // HttpApi, DynamoDB, SQS, Schedule, ScheduleV2, …
	Properties map[string]any
}

// Functions returns the template's AWS::Serverless::Function resources,
// ordered by logical id.
func (t *Template) Functions() ([]Function, error) {
	var fns []Function
	for _, id := range t.IDs("AWS::Serverless::Function") {
		f, err := t.Function(id)
		if err != nil {
			return nil, err
		}
		fns = append(fns, f)
	}
	return fns, nil
}

// IDs returns the logical ids of the resources of type typ (all when typ is
// empty), sorted.
func (t *Template) IDs(typ string) []string {
	var ids []string
	for id, r := range t.Resources {
		if typ == "" || r.Type == typ {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// Function returns the AWS::Serverless::Function id.
func (t *Template) Function(id string) (Function, error) {
	r, ok := t.Resources[id]
	if !ok || r.Type != "AWS::Serverless::Function" {
		return Function{}, fmt.Errorf("no AWS::Serverless::Function %s", id)
	}
	props := mergeGlobals(t.Globals["Function"], r.Properties)
	f := Function{LogicalID: id, CodeURI: props["CodeUri"], Properties: props, Events: map[string]Event{}}
	f.BuildMethod, _ = r.Metadata["BuildMethod"].(string)
	f.Runtime, _ = props["Runtime"].(string)
	f.Handler, _ = props["Handler"].(string)
	f.Description, _ = props["Description"].(string)
	var err error
	if f.Architectures, err = stringList(props["Architectures"]); err != nil {
		return f, fmt.Errorf("%s: Architectures: %w", id, err)
	}
	if f.MemorySize, err = optInt(props["MemorySize"]); err != nil {
		return f, fmt.Errorf("%s: MemorySize: %w", id, err)
	}
	if f.Timeout, err = optInt(props["Timeout"]); err != nil {
		return f, fmt.Errorf("%s: Timeout: %w", id, err)
	}
	if f.ReservedConcurrency, err = optInt(props["ReservedConcurrentExecutions"]); err != nil {
		return f, fmt.Errorf("%s: ReservedConcurrentExecutions: %w", id, err)
	}
	f.LogGroup = mapAt(props, "LoggingConfig")["LogGroup"]
	f.Role = props["Role"]
	vars := mapAt(mapAt(props, "Environment"), "Variables")
	for name := range vars {
		f.DeclaredEnvironment = append(f.DeclaredEnvironment, name)
	}
	sort.Strings(f.DeclaredEnvironment)
	env, err := t.Resolve(vars, nil)
	if err != nil {
		return f, fmt.Errorf("%s: Environment: %w", id, err)
	}
	f.Environment, _ = env.(map[string]any)
	if f.Policies, err = ParsePolicies(props["Policies"]); err != nil {
		return f, fmt.Errorf("%s: Policies: %w", id, err)
	}
	for name, e := range mapAt(props, "Events") {
		em, ok := e.(map[string]any)
		if !ok {
			return f, fmt.Errorf("%s: event %s is not a mapping", id, name)
		}
		typ, _ := em["Type"].(string)
		f.Events[name] = Event{Name: name, Type: typ, Properties: mapAt(em, "Properties")}
	}
	return f, nil
}

// mergeGlobals applies SAM's Globals rules: a property only in Globals is
// taken, mappings merge (the resource wins), lists add up (Globals first),
// and otherwise the resource's value wins.
func mergeGlobals(globals, props map[string]any) map[string]any {
	out := make(map[string]any, len(globals)+len(props))
	for k, v := range globals {
		out[k] = v
	}
	for k, v := range props {
		g, ok := out[k]
		if !ok {
			out[k] = v
			continue
		}
		gm, gok := g.(map[string]any)
		pm, pok := v.(map[string]any)
		gl, glok := g.([]any)
		pl, plok := v.([]any)
		switch {
		case gok && pok:
			out[k] = mergeGlobals(gm, pm)
		case glok && plok:
			out[k] = append(slices.Clone(gl), pl...)
		default:
			out[k] = v
		}
	}
	return out
}

// EventsOfType returns the function's events of type typ, ordered by name.
func (f Function) EventsOfType(typ string) []Event {
	var out []Event
	for _, e := range f.Events {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Routes returns the route keys of the function's HttpApi events, as API
// Gateway names them: "METHOD /path", or DefaultRoute; sorted. An event
// with only one of Method and Path is an error.
func (f Function) Routes() ([]string, error) {
	var routes []string
	for _, e := range f.EventsOfType("HttpApi") {
		r, err := e.HTTPRoute()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.LogicalID, err)
		}
		routes = append(routes, r.Key())
	}
	sort.Strings(routes)
	return routes, nil
}

// DefaultRoute is the route key of an HTTP API's catch-all route: API
// Gateway sends it every request no other route matches, whatever its
// method and path.
const DefaultRoute = "$default"

// anyMethod is the method of a route that takes every method.
const anyMethod = "ANY"

// HTTPRoute is an HttpApi event.
type HTTPRoute struct {
	API                  any    // ApiId
	Method               string // upper case; ANY for any method
	Path                 string // DefaultRoute for the $default route
	PayloadFormatVersion string // empty: SAM's default, 2.0
}

// Key is the route's key in API Gateway: "METHOD /path", or DefaultRoute.
func (r HTTPRoute) Key() string {
	if r.Path == DefaultRoute {
		return DefaultRoute
	}
	return r.Method + " " + r.Path
}

// HTTPRoute reads an HttpApi event. Like SAM, it reads an event with
// neither Method nor Path as the $default route (Path $default, Method
// ANY), and Method x-amazon-apigateway-any-method as ANY.
func (e Event) HTTPRoute() (HTTPRoute, error) {
	if e.Type != "HttpApi" {
		return HTTPRoute{}, fmt.Errorf("event %s is %s, not HttpApi", e.Name, e.Type)
	}
	r := HTTPRoute{API: e.Properties["ApiId"]}
	r.Method, _ = e.Properties["Method"].(string)
	r.Path, _ = e.Properties["Path"].(string)
	r.PayloadFormatVersion, _ = e.Properties["PayloadFormatVersion"].(string)
	switch {
	case e.Properties["Method"] == nil && e.Properties["Path"] == nil:
		r.Method, r.Path = anyMethod, DefaultRoute
	case r.Method == "" || r.Path == "":
		return r, fmt.Errorf("HttpApi event %s needs Method and Path (or neither, for the %s route)", e.Name, DefaultRoute)
	}
	r.Method = strings.ToUpper(r.Method)
	if r.Method == "X-AMAZON-APIGATEWAY-ANY-METHOD" {
		r.Method = anyMethod
	}
	if r.Path == DefaultRoute && r.Method != anyMethod {
		return r, fmt.Errorf("HttpApi event %s: the %s route takes any method, not %s", e.Name, DefaultRoute, r.Method)
	}
	return r, nil
}

// StreamSource is a DynamoDB (stream) event.
type StreamSource struct {
	Stream                     any
	StartingPosition           string
	BatchSize                  int
	BisectBatchOnFunctionError bool
	MaximumRetryAttempts       int
	MaximumRecordAgeInSeconds  int // 0 when not set
	FunctionResponseTypes      []string
	OnFailure                  Destination
	// MaximumBatchingWindowInSeconds and TumblingWindowInSeconds are 0
	// when not set.
	MaximumBatchingWindowInSeconds int
	TumblingWindowInSeconds        int
	// FilterPatterns are FilterCriteria.Filters[].Pattern, as written (JSON).
	FilterPatterns []string
}

// Destination is an OnFailure destination.
type Destination struct {
	Type        string // SAM's Type (SQS, SNS): SAM grants the role access
	Destination any
}

// StreamSource reads a DynamoDB event.
func (e Event) StreamSource() (StreamSource, error) {
	if e.Type != "DynamoDB" {
		return StreamSource{}, fmt.Errorf("event %s is %s, not DynamoDB", e.Name, e.Type)
	}
	p := e.Properties
	s := StreamSource{Stream: p["Stream"]}
	s.StartingPosition, _ = p["StartingPosition"].(string)
	var err error
	if s.BatchSize, err = optInt(p["BatchSize"]); err != nil {
		return s, fmt.Errorf("event %s: BatchSize: %w", e.Name, err)
	}
	if s.MaximumRetryAttempts, err = optInt(p["MaximumRetryAttempts"]); err != nil {
		return s, fmt.Errorf("event %s: MaximumRetryAttempts: %w", e.Name, err)
	}
	if s.MaximumRecordAgeInSeconds, err = optInt(p["MaximumRecordAgeInSeconds"]); err != nil {
		return s, fmt.Errorf("event %s: MaximumRecordAgeInSeconds: %w", e.Name, err)
	}
	if s.MaximumBatchingWindowInSeconds, err = optInt(p["MaximumBatchingWindowInSeconds"]); err != nil {
		return s, fmt.Errorf("event %s: MaximumBatchingWindowInSeconds: %w", e.Name, err)
	}
	if s.TumblingWindowInSeconds, err = optInt(p["TumblingWindowInSeconds"]); err != nil {
		return s, fmt.Errorf("event %s: TumblingWindowInSeconds: %w", e.Name, err)
	}
	if s.BisectBatchOnFunctionError, err = optBool(p["BisectBatchOnFunctionError"]); err != nil {
		return s, fmt.Errorf("event %s: BisectBatchOnFunctionError: %w", e.Name, err)
	}
	if s.FunctionResponseTypes, err = stringList(p["FunctionResponseTypes"]); err != nil {
		return s, fmt.Errorf("event %s: FunctionResponseTypes: %w", e.Name, err)
	}
	onFailure := mapAt(mapAt(p, "DestinationConfig"), "OnFailure")
	s.OnFailure.Type, _ = onFailure["Type"].(string)
	s.OnFailure.Destination = onFailure["Destination"]
	filters, _ := mapAt(p, "FilterCriteria")["Filters"].([]any)
	for _, f := range filters {
		fm, _ := f.(map[string]any)
		pattern, ok := fm["Pattern"].(string)
		if !ok {
			return s, fmt.Errorf("event %s: a filter has no Pattern string", e.Name)
		}
		s.FilterPatterns = append(s.FilterPatterns, pattern)
	}
	return s, nil
}

// QueueSource is an SQS event.
type QueueSource struct {
	Queue                 any
	BatchSize             int
	FunctionResponseTypes []string
	MaximumConcurrency    any // ScalingConfig's, as written (a number or a Ref); nil when not set
}

// QueueSource reads an SQS event.
func (e Event) QueueSource() (QueueSource, error) {
	if e.Type != "SQS" {
		return QueueSource{}, fmt.Errorf("event %s is %s, not SQS", e.Name, e.Type)
	}
	q := QueueSource{Queue: e.Properties["Queue"]}
	var err error
	if q.BatchSize, err = optInt(e.Properties["BatchSize"]); err != nil {
		return q, fmt.Errorf("event %s: BatchSize: %w", e.Name, err)
	}
	if q.FunctionResponseTypes, err = stringList(e.Properties["FunctionResponseTypes"]); err != nil {
		return q, fmt.Errorf("event %s: FunctionResponseTypes: %w", e.Name, err)
	}
	q.MaximumConcurrency = mapAt(e.Properties, "ScalingConfig")["MaximumConcurrency"]
	return q, nil
}

// ScheduleExpression reads a Schedule (EventBridge rule) or ScheduleV2
// (EventBridge Scheduler) event's expression.
func (e Event) ScheduleExpression() (string, error) {
	key := map[string]string{"Schedule": "Schedule", "ScheduleV2": "ScheduleExpression"}[e.Type]
	if key == "" {
		return "", fmt.Errorf("event %s is %s, not Schedule or ScheduleV2", e.Name, e.Type)
	}
	expr, ok := e.Properties[key].(string)
	if !ok {
		return "", fmt.Errorf("event %s has no %s", e.Name, key)
	}
	return expr, nil
}

// ---------------------------------------------------------------- policies

// Policy is one entry of a SAM Policies list.
type Policy struct {
	// Template and Args: a SAM policy template ("DynamoDBCrudPolicy", …)
	// and its parameters.
	Template string
	Args     map[string]any
	// Statements of an inline policy document.
	Statements []Statement
	// Managed is a managed policy's name or ARN.
	Managed any
}

// Statement is an IAM policy statement.
type Statement struct {
	Sid       string
	Effect    string
	Actions   []string
	Resources []any
	Condition map[string]any
}

// ParsePolicies reads a SAM Policies property: a policy, or a list of them.
func ParsePolicies(v any) ([]Policy, error) {
	if v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		list = []any{v}
	}
	var out []Policy
	for _, p := range list {
		switch x := p.(type) {
		case string, Intrinsic:
			out = append(out, Policy{Managed: x})
		case map[string]any:
			if stmts, ok := x["Statement"]; ok {
				ss, err := parseStatements(stmts)
				if err != nil {
					return nil, err
				}
				out = append(out, Policy{Statements: ss})
				continue
			}
			if len(x) != 1 {
				return nil, fmt.Errorf("policy %v is neither a policy template nor a document", x)
			}
			for name, args := range x {
				am, ok := args.(map[string]any)
				if !ok && args != nil {
					return nil, fmt.Errorf("policy template %s: parameters are not a mapping", name)
				}
				out = append(out, Policy{Template: name, Args: am})
			}
		default:
			return nil, fmt.Errorf("policy %v: unexpected %T", p, p)
		}
	}
	return out, nil
}

func parseStatements(v any) ([]Statement, error) {
	list, ok := v.([]any)
	if !ok {
		list = []any{v}
	}
	var out []Statement
	for _, s := range list {
		m, ok := s.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("statement %v is not a mapping", s)
		}
		st := Statement{Condition: mapAt(m, "Condition")}
		st.Sid, _ = m["Sid"].(string)
		st.Effect, _ = m["Effect"].(string)
		var err error
		if st.Actions, err = stringList(m["Action"]); err != nil {
			return nil, fmt.Errorf("statement %s: Action: %w", st.Sid, err)
		}
		switch r := m["Resource"].(type) {
		case []any:
			st.Resources = r
		case nil:
		default:
			st.Resources = []any{r}
		}
		out = append(out, st)
	}
	return out, nil
}

// Grant is one action a role allows on one resource.
type Grant struct {
	Action string
	// Resource names what the ARN points at: a logical id ("Table",
	// "DeliveryQueue", "OffersFunctionLogGroup"), or one followed by a part
	// of it ("Table/index", "Table/stream", "RetryStateMachine/executions");
	// any other ARN as written.
	Resource string
	// Condition is the statement's Condition as JSON, "" when none.
	Condition string
	Sid       string
}

// String writes the grant as "action resource [if condition]".
func (g Grant) String() string {
	s := g.Action + " " + g.Resource
	if g.Condition != "" {
		s += " if " + g.Condition
	}
	return s
}

// RoleOf returns the logical id of the AWS::IAM::Role a Role property
// (!GetAtt <id>.Arn) names.
func RoleOf(role any) (string, error) {
	i, ok := role.(Intrinsic)
	args, _ := i.Arg.([]any)
	if !ok || i.Fn != "Fn::GetAtt" || len(args) != 2 || args[1] != "Arn" {
		return "", fmt.Errorf("role %v is not !GetAtt <Role>.Arn", role)
	}
	id, _ := args[0].(string)
	return id, nil
}

// RoleGrants returns every action the inline policies of the AWS::IAM::Role
// id allow, one Grant per action and resource, and the services that may
// assume it. A Deny, a managed policy or a permissions boundary is an error:
// the checks read inline allows only.
func (t *Template) RoleGrants(id string) (grants []Grant, assumedBy []string, err error) {
	r, ok := t.Resources[id]
	if !ok || r.Type != "AWS::IAM::Role" {
		return nil, nil, fmt.Errorf("no AWS::IAM::Role %s", id)
	}
	for _, k := range []string{"ManagedPolicyArns", "PermissionsBoundary"} {
		if r.Properties[k] != nil {
			return nil, nil, fmt.Errorf("%s: %s is not read", id, k)
		}
	}
	trust, err := parseStatements(mapAt(r.Properties, "AssumeRolePolicyDocument")["Statement"])
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", id, err)
	}
	for _, st := range trust {
		if st.Effect != "Allow" || !slices.Equal(st.Actions, []string{"sts:AssumeRole"}) {
			return nil, nil, fmt.Errorf("%s: trust statement %+v", id, st)
		}
	}
	trustStmts, _ := mapAt(r.Properties, "AssumeRolePolicyDocument")["Statement"].([]any)
	for _, st := range trustStmts {
		m, _ := st.(map[string]any)
		names, err := stringList(mapAt(m, "Principal")["Service"])
		if err != nil {
			return nil, nil, fmt.Errorf("%s: principal: %w", id, err)
		}
		assumedBy = append(assumedBy, names...)
	}
	policies, _ := r.Properties["Policies"].([]any)
	for _, p := range policies {
		pm, _ := p.(map[string]any)
		stmts, err := parseStatements(mapAt(pm, "PolicyDocument")["Statement"])
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", id, err)
		}
		for _, st := range stmts {
			if st.Effect != "Allow" {
				return nil, nil, fmt.Errorf("%s: statement %s: effect %s", id, st.Sid, st.Effect)
			}
			cond := ""
			if len(st.Condition) > 0 {
				b, _ := json.Marshal(st.Condition)
				cond = string(b)
			}
			for _, res := range st.Resources {
				for _, a := range st.Actions {
					grants = append(grants, Grant{Action: a, Resource: ARNResource(res), Condition: cond, Sid: st.Sid})
				}
			}
		}
	}
	return grants, assumedBy, nil
}

// ARNResource names the resource an ARN in a policy points at (see
// Grant.Resource).
func ARNResource(arn any) string {
	i, ok := arn.(Intrinsic)
	if !ok {
		return fmt.Sprint(arn)
	}
	switch i.Fn {
	case "Ref":
		return fmt.Sprint(i.Arg)
	case "Fn::GetAtt":
		args := i.Arg.([]any)
		switch args[1] {
		case "Arn":
			return fmt.Sprint(args[0])
		case "StreamArn":
			return fmt.Sprint(args[0]) + "/stream"
		}
	case "Fn::Sub":
		if s, ok := i.Arg.(string); ok {
			for _, part := range []struct{ pattern, suffix string }{
				{`^\$\{(\w+)\.Arn\}/index/\*$`, "/index"},
				{`^\$\{(\w+)\.Arn\}/stream/\*$`, "/stream"},
				{`^arn:\$\{AWS::Partition\}:states:\$\{AWS::Region\}:\$\{AWS::AccountId\}:execution:\$\{(\w+)\.Name\}:\*$`, "/executions"},
			} {
				if m := regexp.MustCompile(part.pattern).FindStringSubmatch(s); m != nil {
					return m[1] + part.suffix
				}
			}
		}
	}
	return i.String()
}

// ---------------------------------------------------------------- other resources

// KeyElement is one part of a key schema.
type KeyElement struct {
	AttributeName string
	KeyType       string // HASH or RANGE
}

// Index is a global secondary index.
type Index struct {
	Name             string
	KeySchema        []KeyElement
	ProjectionType   string
	NonKeyAttributes []string // of an INCLUDE projection
}

// Table is an AWS::DynamoDB::Table.
type Table struct {
	LogicalID              string
	BillingMode            string
	AttributeTypes         map[string]string // attribute name → S, N or B
	KeySchema              []KeyElement
	GlobalSecondaryIndexes []Index
	TTLAttribute           string
	TTLEnabled             bool
	StreamViewType         string
	PointInTimeRecovery    bool
	DeletionPolicy         string
	UpdateReplacePolicy    string
}

// Table returns the AWS::DynamoDB::Table id.
func (t *Template) Table(id string) (Table, error) {
	r, ok := t.Resources[id]
	if !ok || r.Type != "AWS::DynamoDB::Table" {
		return Table{}, fmt.Errorf("no AWS::DynamoDB::Table %s", id)
	}
	p := r.Properties
	tb := Table{LogicalID: id, AttributeTypes: map[string]string{}, DeletionPolicy: r.DeletionPolicy, UpdateReplacePolicy: r.UpdateReplacePolicy}
	tb.BillingMode, _ = p["BillingMode"].(string)
	attrs, _ := p["AttributeDefinitions"].([]any)
	for _, a := range attrs {
		am, _ := a.(map[string]any)
		name, _ := am["AttributeName"].(string)
		typ, _ := am["AttributeType"].(string)
		if name == "" || typ == "" {
			return tb, fmt.Errorf("%s: malformed attribute definition %v", id, a)
		}
		tb.AttributeTypes[name] = typ
	}
	var err error
	if tb.KeySchema, err = keySchema(p["KeySchema"]); err != nil {
		return tb, fmt.Errorf("%s: KeySchema: %w", id, err)
	}
	gsis, _ := p["GlobalSecondaryIndexes"].([]any)
	for _, g := range gsis {
		gm, _ := g.(map[string]any)
		ix := Index{}
		ix.Name, _ = gm["IndexName"].(string)
		ix.ProjectionType, _ = mapAt(gm, "Projection")["ProjectionType"].(string)
		nonKey, _ := mapAt(gm, "Projection")["NonKeyAttributes"].([]any)
		for _, a := range nonKey {
			name, ok := a.(string)
			if !ok {
				return tb, fmt.Errorf("%s: index %s: NonKeyAttributes holds %v", id, ix.Name, a)
			}
			ix.NonKeyAttributes = append(ix.NonKeyAttributes, name)
		}
		if ix.KeySchema, err = keySchema(gm["KeySchema"]); err != nil {
			return tb, fmt.Errorf("%s: index %s: %w", id, ix.Name, err)
		}
		tb.GlobalSecondaryIndexes = append(tb.GlobalSecondaryIndexes, ix)
	}
	ttl := mapAt(p, "TimeToLiveSpecification")
	tb.TTLAttribute, _ = ttl["AttributeName"].(string)
	if tb.TTLEnabled, err = optBool(ttl["Enabled"]); err != nil {
		return tb, fmt.Errorf("%s: TimeToLiveSpecification: %w", id, err)
	}
	tb.StreamViewType, _ = mapAt(p, "StreamSpecification")["StreamViewType"].(string)
	if tb.PointInTimeRecovery, err = optBool(mapAt(p, "PointInTimeRecoverySpecification")["PointInTimeRecoveryEnabled"]); err != nil {
		return tb, fmt.Errorf("%s: PointInTimeRecoverySpecification: %w", id, err)
	}
	return tb, nil
}

func keySchema(v any) ([]KeyElement, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, errors.New("not a list")
	}
	var out []KeyElement
	for _, e := range list {
		em, _ := e.(map[string]any)
		k := KeyElement{}
		k.AttributeName, _ = em["AttributeName"].(string)
		k.KeyType, _ = em["KeyType"].(string)
		if k.AttributeName == "" || k.KeyType == "" {
			return nil, fmt.Errorf("malformed key element %v", e)
		}
		out = append(out, k)
	}
	return out, nil
}

// Queue is an AWS::SQS::Queue.
type Queue struct {
	LogicalID              string
	VisibilityTimeout      int // seconds; 0 when not set (SQS: 30)
	MessageRetentionPeriod int // seconds; 0 when not set (SQS: 4 days)
	DeadLetterTarget       any // RedrivePolicy.deadLetterTargetArn
	MaxReceiveCount        int
}

// Queue returns the AWS::SQS::Queue id.
func (t *Template) Queue(id string) (Queue, error) {
	r, ok := t.Resources[id]
	if !ok || r.Type != "AWS::SQS::Queue" {
		return Queue{}, fmt.Errorf("no AWS::SQS::Queue %s", id)
	}
	q := Queue{LogicalID: id}
	var err error
	if q.VisibilityTimeout, err = optInt(r.Properties["VisibilityTimeout"]); err != nil {
		return q, fmt.Errorf("%s: VisibilityTimeout: %w", id, err)
	}
	if q.MessageRetentionPeriod, err = optInt(r.Properties["MessageRetentionPeriod"]); err != nil {
		return q, fmt.Errorf("%s: MessageRetentionPeriod: %w", id, err)
	}
	redrive := mapAt(r.Properties, "RedrivePolicy")
	q.DeadLetterTarget = redrive["deadLetterTargetArn"]
	if q.MaxReceiveCount, err = optInt(redrive["maxReceiveCount"]); err != nil {
		return q, fmt.Errorf("%s: maxReceiveCount: %w", id, err)
	}
	return q, nil
}

// StateMachine is an AWS::Serverless::StateMachine.
type StateMachine struct {
	LogicalID     string
	Type          string // STANDARD or EXPRESS
	DefinitionURI any
	Substitutions map[string]any
	Policies      []Policy
	Role          any
}

// StateMachine returns the AWS::Serverless::StateMachine id.
func (t *Template) StateMachine(id string) (StateMachine, error) {
	r, ok := t.Resources[id]
	if !ok || r.Type != "AWS::Serverless::StateMachine" {
		return StateMachine{}, fmt.Errorf("no AWS::Serverless::StateMachine %s", id)
	}
	sm := StateMachine{LogicalID: id, DefinitionURI: r.Properties["DefinitionUri"], Substitutions: mapAt(r.Properties, "DefinitionSubstitutions")}
	sm.Type, _ = r.Properties["Type"].(string)
	sm.Role = r.Properties["Role"]
	var err error
	if sm.Policies, err = ParsePolicies(r.Properties["Policies"]); err != nil {
		return sm, fmt.Errorf("%s: Policies: %w", id, err)
	}
	return sm, nil
}

// Alarm is an AWS::CloudWatch::Alarm on one metric, or on an expression
// over several (Metrics).
type Alarm struct {
	LogicalID          string
	Namespace          string
	MetricName         string
	Dimensions         map[string]any // name → value
	Statistic          string
	Period             int
	EvaluationPeriods  int
	Threshold          float64
	ComparisonOperator string
	TreatMissingData   string
	AlarmActions       []any
	OKActions          []any
	// Expression is the metric math the alarm watches, when it has
	// Metrics; Inputs are the metrics it reads, each with the period and
	// statistic of its MetricStat.
	Expression string
	Inputs     []Alarm
}

// Alarms returns the template's AWS::CloudWatch::Alarm resources, ordered
// by logical id.
func (t *Template) Alarms() ([]Alarm, error) {
	var out []Alarm
	for _, id := range t.IDs("AWS::CloudWatch::Alarm") {
		p := t.Resources[id].Properties
		a := Alarm{LogicalID: id, Dimensions: map[string]any{}}
		a.Namespace, _ = p["Namespace"].(string)
		a.MetricName, _ = p["MetricName"].(string)
		a.Statistic, _ = p["Statistic"].(string)
		a.ComparisonOperator, _ = p["ComparisonOperator"].(string)
		a.TreatMissingData, _ = p["TreatMissingData"].(string)
		a.AlarmActions, _ = p["AlarmActions"].([]any)
		a.OKActions, _ = p["OKActions"].([]any)
		a.Dimensions = dimensions(p["Dimensions"])
		metrics, _ := p["Metrics"].([]any)
		for _, m := range metrics {
			mm, _ := m.(map[string]any)
			if e, ok := mm["Expression"].(string); ok {
				a.Expression = e
				continue
			}
			stat := mapAt(mm, "MetricStat")
			metric := mapAt(stat, "Metric")
			in := Alarm{LogicalID: fmt.Sprint(mm["Id"]), Dimensions: dimensions(metric["Dimensions"])}
			in.Namespace, _ = metric["Namespace"].(string)
			in.MetricName, _ = metric["MetricName"].(string)
			in.Statistic, _ = stat["Stat"].(string)
			var err error
			if in.Period, err = optInt(stat["Period"]); err != nil {
				return nil, fmt.Errorf("%s: metric %s: Period: %w", id, in.LogicalID, err)
			}
			a.Inputs = append(a.Inputs, in)
		}
		var err error
		if a.Period, err = optInt(p["Period"]); err != nil {
			return nil, fmt.Errorf("%s: Period: %w", id, err)
		}
		if a.EvaluationPeriods, err = optInt(p["EvaluationPeriods"]); err != nil {
			return nil, fmt.Errorf("%s: EvaluationPeriods: %w", id, err)
		}
		if a.Threshold, err = optFloat(p["Threshold"]); err != nil {
			return nil, fmt.Errorf("%s: Threshold: %w", id, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// dimensions reads a metric's Dimensions: name → value.
func dimensions(v any) map[string]any {
	out := map[string]any{}
	list, _ := v.([]any)
	for _, d := range list {
		dm, _ := d.(map[string]any)
		name, _ := dm["Name"].(string)
		out[name] = dm["Value"]
	}
	return out
}

// ---------------------------------------------------------------- scalars

// optInt reads an integer written as a number or a numeric string; nil is 0.
func optInt(v any) (int, error) {
	f, err := optFloat(v)
	if err != nil {
		return 0, err
	}
	if f != float64(int(f)) {
		return 0, fmt.Errorf("%v is not an integer", v)
	}
	return int(f), nil
}

func optFloat(v any) (float64, error) {
	switch x := v.(type) {
	case nil:
		return 0, nil
	case int:
		return float64(x), nil
	case float64:
		return x, nil
	case string:
		f, err := strconv.ParseFloat(x, 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not a number", x)
		}
		return f, nil
	}
	return 0, fmt.Errorf("%v is not a number", v)
}

func optBool(v any) (bool, error) {
	switch x := v.(type) {
	case nil:
		return false, nil
	case bool:
		return x, nil
	case string:
		b, err := strconv.ParseBool(x)
		if err != nil {
			return false, fmt.Errorf("%q is not a boolean", x)
		}
		return b, nil
	}
	return false, fmt.Errorf("%v is not a boolean", v)
}

// stringList reads a list of strings, or one string; nil is nil.
func stringList(v any) ([]string, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case string:
		return []string{x}, nil
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("%v is not a string", e)
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%v is not a list of strings", v)
}
