package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
)

// The expectations below are docs/aws.md, written out again on purpose:
// contract.go is the stack's copy, these are the test's.

func ref(id string) map[string]any { return map[string]any{"Ref": id} }
func getAtt(id, attr string) map[string]any {
	return map[string]any{"Fn::GetAtt": []any{id, attr}}
}

var (
	apiFunctions = []string{"OffersFunction", "PartnersFunction", "ConversionsFunction", "ReportsFunction", "PayoutsFunction",
		"ApplicationsFunction", "WebhooksFunction", "DeliveriesFunction", "KeysFunction", "DashboardFunction", "ClickFunction", "FraudFunction", "HealthFunction"}
	// fallbackID is the $default route's function: no route of its own; it
	// reads API keys and counts requests, like the reports function.
	fallbackID = "FallbackFunction"
	timeouts   = map[string]float64{
		"OffersFunction": 10, "PartnersFunction": 10, "ConversionsFunction": 10, "ReportsFunction": 10, "PayoutsFunction": 10,
		"ApplicationsFunction": 10, "WebhooksFunction": 10, "DeliveriesFunction": 10, "KeysFunction": 10, "DashboardFunction": 10, "HealthFunction": 10, "FallbackFunction": 10,
		"ApproverFunction": 240, "FanoutFunction": 60, "DeliverFunction": 30, "AttemptFunction": 20, "ReconcilerFunction": 240,
		"RollupFunction": 60, "ClickFunction": 10, "FraudFunction": 10,
	}
	// schedules are the EventBridge rules, by the function they run.
	schedules  = map[string]string{"ApproverSchedule": "ApproverFunction", "ReconcilerSchedule": "ReconcilerFunction"}
	wantRoutes = map[string]string{
		"GET /api/v1/offers":                                    "OffersFunction",
		"POST /api/v1/offers":                                   "OffersFunction",
		"GET /api/v1/offers/{id}":                               "OffersFunction",
		"PATCH /api/v1/offers/{id}":                             "OffersFunction",
		"GET /api/v1/partners":                                  "PartnersFunction",
		"GET /api/v1/partners/{id}":                             "PartnersFunction",
		"POST /api/v1/partners/{id}/approve":                    "PartnersFunction",
		"POST /api/v1/partners/{id}/reject":                     "PartnersFunction",
		"POST /api/v1/partners/{id}/ban":                        "PartnersFunction",
		"PUT /api/v1/partners/{id}/postback":                    "PartnersFunction",
		"GET /api/v1/partners/{id}/postback":                    "PartnersFunction",
		"DELETE /api/v1/partners/{id}/postback":                 "PartnersFunction",
		"POST /api/v1/partners/{id}/postback/test":              "PartnersFunction",
		"POST /api/v1/partners/{id}/postback/enable":            "PartnersFunction",
		"POST /api/v1/conversions":                              "ConversionsFunction",
		"GET /api/v1/conversions":                               "ConversionsFunction",
		"GET /api/v1/conversions/{id}":                          "ConversionsFunction",
		"POST /api/v1/conversions/{id}/approve":                 "ConversionsFunction",
		"POST /api/v1/conversions/{id}/reject":                  "ConversionsFunction",
		"GET /api/v1/postback-token":                            "ConversionsFunction",
		"POST /api/v1/postback-token":                           "ConversionsFunction",
		"DELETE /api/v1/postback-token":                         "ConversionsFunction",
		"GET /postback":                                         "ConversionsFunction",
		"GET /api/v1/reports":                                   "ReportsFunction",
		"GET /api/v1/partners/{id}/balance":                     "PayoutsFunction",
		"GET /api/v1/payouts":                                   "PayoutsFunction",
		"POST /api/v1/payouts":                                  "PayoutsFunction",
		"GET /api/v1/payouts/{id}":                              "PayoutsFunction",
		"POST /api/v1/payouts/{id}/paid":                        "PayoutsFunction",
		"POST /api/v1/conversions/{id}/reverse":                 "ConversionsFunction",
		"POST /api/v1/partners/{id}/reactivate":                 "PartnersFunction",
		"POST /api/v1/partners/{id}/invite":                     "PartnersFunction",
		"GET /api/v1/offers/{id}/partners/{partnerId}/terms":    "OffersFunction",
		"PUT /api/v1/offers/{id}/partners/{partnerId}/terms":    "OffersFunction",
		"DELETE /api/v1/offers/{id}/partners/{partnerId}/terms": "OffersFunction",
		"POST /api/public/brands/{brandId}/applications":        "ApplicationsFunction",
		"POST /api/public/webhooks":                             "WebhooksFunction",
		"GET /api/public/webhooks":                              "WebhooksFunction",
		"GET /api/public/webhooks/{id}":                         "WebhooksFunction",
		"PATCH /api/public/webhooks/{id}":                       "WebhooksFunction",
		"DELETE /api/public/webhooks/{id}":                      "WebhooksFunction",
		"POST /api/public/webhooks/{id}/test":                   "WebhooksFunction",
		"POST /api/public/webhooks/{id}/enable":                 "WebhooksFunction",
		"POST /api/public/webhooks/{id}/rotate":                 "WebhooksFunction",
		"GET /api/public/webhook-events":                        "WebhooksFunction",
		"GET /api/v1/deliveries":                                "DeliveriesFunction",
		"GET /api/v1/deliveries/{id}":                           "DeliveriesFunction",
		"POST /api/v1/deliveries/{id}/retry":                    "DeliveriesFunction",
		"POST /api/public/webhooks/{id}/recover":                "DeliveriesFunction",
		"POST /api/v1/partners/{id}/postback/recover":           "DeliveriesFunction",
		"GET /api/v1/keys":                                      "KeysFunction",
		"POST /api/v1/keys":                                     "KeysFunction",
		"DELETE /api/v1/keys/{id}":                              "KeysFunction",
		"GET /api/v1/audit-log":                                 "KeysFunction",
		"GET /dashboard":                                        "DashboardFunction",
		"GET /dashboard/{path+}":                                "DashboardFunction",
		"POST /dashboard/{path+}":                               "DashboardFunction",
		"GET /apply/{brandId}":                                  "DashboardFunction",
		"POST /apply/{brandId}":                                 "DashboardFunction",
		"GET /portal":                                           "DashboardFunction",
		"GET /portal/{path+}":                                   "DashboardFunction",
		"POST /portal/{path+}":                                  "DashboardFunction",
		"GET /c/{offerId}":                                      "ClickFunction",
		"GET /api/v1/clicks":                                    "FraudFunction",
		"GET /api/v1/clicks/{id}":                               "FraudFunction",
		"GET /api/v1/fraud/settings":                            "FraudFunction",
		"PUT /api/v1/fraud/settings":                            "FraudFunction",
		"GET /api/v1/fraud/blocked-ips":                         "FraudFunction",
		"POST /api/v1/fraud/blocked-ips":                        "FraudFunction",
		"DELETE /api/v1/fraud/blocked-ips/{id}":                 "FraudFunction",
		"GET /healthz":                                          "HealthFunction",
		"GET /readyz":                                           "HealthFunction",
		"$default":                                              "FallbackFunction",
	}
)

// wantEnv is a function's environment per docs/aws.md.
func wantEnv(id string) map[string]any {
	env := map[string]any{"TALLY_TABLE": ref("Table"), "TALLY_DELIVERY_RETENTION_DAYS": ref("DeliveryRetentionDays")}
	if slices.Contains(apiFunctions, id) || id == fallbackID {
		env["TALLY_RATE_LIMIT"] = ref("RateLimit")
		env["TALLY_APPLICATION_RATE_LIMIT"] = ref("ApplicationRateLimit")
	}
	if id == "ClickFunction" || id == fallbackID {
		env["TALLY_CLICK_RATE_LIMIT"] = ref("ClickRateLimit")
	}
	switch id {
	case "FanoutFunction", "DeliveriesFunction", "DashboardFunction", "ReconcilerFunction":
		env["TALLY_DELIVERY_QUEUE_URL"] = ref("DeliveryQueue")
	case "DeliverFunction":
		env["TALLY_RETRY_STATE_MACHINE_ARN"] = ref("RetryStateMachine")
		env["TALLY_DELIVERY_QUEUE_URL"] = ref("DeliveryQueue") // paced deliveries wait in it
	}
	switch id {
	case "WebhooksFunction", "DashboardFunction", "DeliverFunction", "AttemptFunction": // they set or sign webhook secrets
		env["TALLY_SECRETS_KEY_ARN"] = getAtt("SecretsKey", "Arn")
	}
	if id == "ReconcilerFunction" {
		env["TALLY_DELIVER_MAX_CONCURRENCY"] = ref("DeliverMaxConcurrency")
		env["TALLY_FANOUT_DLQ_URL"] = ref("FanoutDLQ")
	}
	return env
}

// TestResources checks the stack holds exactly the resources of the
// contract, under its logical ids, and nothing of an unexpected kind.
func TestResources(t *testing.T) {
	s := synth(t)
	want := map[string]string{
		"Table": "AWS::DynamoDB::Table", "HttpApi": "AWS::ApiGatewayV2::Api",
		"DeliveryQueue": "AWS::SQS::Queue", "DeliveryDLQ": "AWS::SQS::Queue", "FanoutDLQ": "AWS::SQS::Queue", "RollupDLQ": "AWS::SQS::Queue",
		"RollupDLQAlarm": "AWS::CloudWatch::Alarm", "AlarmTopicKey": "AWS::KMS::Key", "SecretsKey": "AWS::KMS::Key",
		"RetryStateMachine": "AWS::StepFunctions::StateMachine",
		"DeliveryDLQAlarm":  "AWS::CloudWatch::Alarm", "FanoutDLQAlarm": "AWS::CloudWatch::Alarm",
		"RetryFailedExecutionsAlarm": "AWS::CloudWatch::Alarm", "RetryTimedOutExecutionsAlarm": "AWS::CloudWatch::Alarm",
	}
	for id := range timeouts {
		want[id] = "AWS::Lambda::Function"
	}
	for id := range schedules {
		want[id] = "AWS::Events::Rule"
	}
	for id := range timeouts {
		want[id+"LogGroup"] = "AWS::Logs::LogGroup"
	}
	want["AlarmTopic"] = "AWS::SNS::Topic"
	resources := s.json["Resources"].(map[string]any)
	for id, typ := range want {
		r, ok := resources[id].(map[string]any)
		if !ok {
			t.Errorf("no resource %s (%s)", id, typ)
		} else if r["Type"] != typ {
			t.Errorf("%s is a %v, want %s", id, r["Type"], typ)
		}
	}
	counts := map[string]float64{
		"AWS::Lambda::Function":            float64(len(timeouts)),
		"AWS::DynamoDB::Table":             1,
		"AWS::SQS::Queue":                  4,
		"AWS::StepFunctions::StateMachine": 1,
		"AWS::ApiGatewayV2::Api":           1,
		"AWS::ApiGatewayV2::Stage":         1,
		"AWS::ApiGatewayV2::Route":         float64(len(wantRoutes)),
		"AWS::ApiGatewayV2::Integration":   float64(len(apiFunctions) + 1), // and the fallback's
		"AWS::Lambda::EventSourceMapping":  3,
		"AWS::Events::Rule":                float64(len(schedules)),
		// An errors and a throttles alarm per function, and 13 others.
		"AWS::CloudWatch::Alarm": float64(len(timeouts) + 2 + 14), // errors of each function, throttles of the 2 reserved ones and of the account
		"AWS::KMS::Key":          2,                               // AlarmTopic's, the signing secrets'
		"AWS::SNS::Topic":        1,
		"AWS::SNS::Subscription": 1, // with AlarmEmail set
		"AWS::Logs::LogGroup":    float64(len(timeouts)),
		// One per route (API Gateway), one per schedule.
		"AWS::Lambda::Permission": float64(len(wantRoutes) + len(schedules)),
		// One role per function, and the state machine's, each with its
		// policy.
		"AWS::IAM::Role":   float64(len(timeouts) + 1),
		"AWS::IAM::Policy": float64(len(timeouts) + 1),
	}
	for typ, n := range counts {
		cdkAssert(t, func() {
			s.template.ResourceCountIs(jsii.String(typ), jsii.Number(n))
		})
	}
	for id, r := range resources {
		typ := r.(map[string]any)["Type"].(string)
		if _, ok := counts[typ]; !ok {
			t.Errorf("unexpected resource %s of type %s", id, typ)
		}
	}
}

func TestFunctions(t *testing.T) {
	s := synth(t)
	fns := s.resources("AWS::Lambda::Function")
	if len(fns) != len(timeouts) {
		t.Errorf("%d functions, want %d", len(fns), len(timeouts))
	}
	for id, timeout := range timeouts {
		p := s.props(t, "AWS::Lambda::Function", id)
		memory := 256.0
		if id == "ReconcilerFunction" {
			memory = 1024 // CPU for its re-drives
		}
		for k, want := range map[string]any{
			"Runtime":       "provided.al2023",
			"Architectures": []any{"arm64"},
			"Handler":       "bootstrap",
			"MemorySize":    memory,
			"Timeout":       timeout,
		} {
			if !reflect.DeepEqual(p[k], want) {
				t.Errorf("%s %s = %v, want %v", id, k, p[k], want)
			}
		}
		env, _ := p["Environment"].(map[string]any)
		if got, want := env["Variables"], any(wantEnv(id)); !reflect.DeepEqual(got, want) {
			t.Errorf("%s environment:\n got %s\nwant %s", id, jsonString(got), jsonString(want))
		}
	}
	// The same, in CDK's assertion language, for one function.
	cdkAssert(t, func() {
		s.template.HasResourceProperties(jsii.String("AWS::Lambda::Function"), map[string]any{
			"Runtime": "provided.al2023", "Architectures": []any{"arm64"}, "Handler": "bootstrap",
			"MemorySize": 256, "Timeout": 30,
			"Environment": map[string]any{"Variables": assertions.Match_ObjectEquals(&map[string]any{
				"TALLY_TABLE":                   ref("Table"),
				"TALLY_DELIVERY_RETENTION_DAYS": ref("DeliveryRetentionDays"),
				"TALLY_RETRY_STATE_MACHINE_ARN": ref("RetryStateMachine"),
				"TALLY_DELIVERY_QUEUE_URL":      ref("DeliveryQueue"),
				"TALLY_SECRETS_KEY_ARN":         getAtt("SecretsKey", "Arn"),
			})},
		})
	})
}

// TestFunctionFolders checks the stack's functions are functions/*: one per
// folder, named after it.
func TestFunctionFolders(t *testing.T) {
	entries, err := os.ReadDir(filepath.Join(repoRoot, "functions"))
	if err != nil {
		t.Fatal(err)
	}
	var dirs, stack []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, e.Name())
		}
	}
	for _, f := range functions {
		stack = append(stack, f.Dir)
		if want := strings.ToUpper(f.Dir[:1]) + f.Dir[1:] + "Function"; f.ID != want {
			t.Errorf("functions/%s is %s, want %s", f.Dir, f.ID, want)
		}
	}
	sort.Strings(stack)
	if !slices.Equal(dirs, stack) {
		t.Errorf("functions/ has %v, the stack %v", dirs, stack)
	}
}

// TestRoutes checks every route goes to its function through a Lambda proxy
// integration with payload format 2.0, and that the routes are the ones
// internal/httpapi serves for each function's group.
func TestRoutes(t *testing.T) {
	s := synth(t)
	integrations := s.resources("AWS::ApiGatewayV2::Integration")
	got := map[string]string{}
	for id, r := range s.resources("AWS::ApiGatewayV2::Route") {
		p := r["Properties"].(map[string]any)
		key, _ := p["RouteKey"].(string)
		if !reflect.DeepEqual(p["ApiId"], ref("HttpApi")) {
			t.Errorf("route %s: ApiId %v", key, p["ApiId"])
		}
		target := jsonString(p["Target"])
		var integration map[string]any
		for iid, i := range integrations {
			if strings.Contains(target, strconv.Quote(iid)) {
				integration = i["Properties"].(map[string]any)
			}
		}
		if integration == nil {
			t.Errorf("route %s (%s): no integration for target %s", key, id, target)
			continue
		}
		if integration["IntegrationType"] != "AWS_PROXY" || integration["PayloadFormatVersion"] != "2.0" {
			t.Errorf("route %s: integration %s", key, jsonString(integration))
		}
		uri, ok := integration["IntegrationUri"].(map[string]any)["Fn::GetAtt"].([]any)
		if !ok || len(uri) != 2 || uri[1] != "Arn" {
			t.Errorf("route %s: integration URI %v", key, integration["IntegrationUri"])
			continue
		}
		got[key] = uri[0].(string)
	}
	if !reflect.DeepEqual(got, wantRoutes) {
		t.Errorf("routes:\n got %v\nwant %v", got, wantRoutes)
	}

	// internal/httpapi's route table, read from its source (this module
	// cannot import the root module's internal packages).
	served := servedRoutes(t)
	for _, f := range functions {
		if f.Kind != apiFunction && f.Kind != fallbackFunction {
			continue
		}
		group := functionGroup(t, f.Dir)
		var stack []string
		for key, fn := range got {
			if fn == f.ID {
				stack = append(stack, key)
			}
		}
		sort.Strings(stack)
		want := served[group]
		sort.Strings(want)
		if f.Kind == fallbackFunction {
			// Its group serves no route: the function is what no route
			// matches.
			if len(want) > 0 || group != "fallback" {
				t.Errorf("%s serves group %q with routes %v, want the fallback group, which has none", f.ID, group, want)
			}
			want = []string{"$default"}
		}
		if !slices.Equal(stack, want) {
			t.Errorf("%s (group %q): stack routes %v, want %v", f.ID, group, stack, want)
		}
	}

	// API Gateway may invoke each API function, per route.
	perms := map[string]int{}
	for _, r := range s.resources("AWS::Lambda::Permission") {
		p := r["Properties"].(map[string]any)
		if p["Principal"] == "apigateway.amazonaws.com" && p["Action"] == "lambda:InvokeFunction" {
			perms[jsonString(p["FunctionName"])]++
		}
	}
	for _, id := range append(slices.Clone(apiFunctions), fallbackID) {
		if perms[jsonString(getAtt(id, "Arn"))] == 0 {
			t.Errorf("API Gateway may not invoke %s", id)
		}
	}

	// The $default route, as HttpApiProps.DefaultIntegration makes it: API
	// Gateway may invoke the fallback for any method and path of any stage.
	cdkAssert(t, func() {
		s.template.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Route"), map[string]any{
			"ApiId": ref("HttpApi"), "RouteKey": "$default",
		})
	})
	cdkAssert(t, func() {
		s.template.HasResourceProperties(jsii.String("AWS::Lambda::Permission"), map[string]any{
			"Action":       "lambda:InvokeFunction",
			"FunctionName": getAtt(fallbackID, "Arn"),
			"Principal":    "apigateway.amazonaws.com",
			"SourceArn": map[string]any{"Fn::Join": []any{"", assertions.Match_ArrayWith(&[]any{
				map[string]any{"Ref": "HttpApi"}, "/*/*",
			})}},
		})
	})
}

// servedRoutes reads the routes of each group from internal/httpapi's
// routes(), whose entries start {GroupX, "METHOD", "/pattern", ...}.
func servedRoutes(t *testing.T) map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, filepath.Join(repoRoot, "internal", "httpapi"), func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	var routes *ast.FuncDecl
	for _, pkg := range pkgs {
		for _, file := range pkg.Files {
			for _, decl := range file.Decls {
				switch d := decl.(type) {
				case *ast.GenDecl:
					for _, spec := range d.Specs {
						if vs, ok := spec.(*ast.ValueSpec); ok && d.Tok == token.CONST {
							for i, name := range vs.Names {
								if i < len(vs.Values) {
									if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
										consts[name.Name], _ = strconv.Unquote(lit.Value)
									}
								}
							}
						}
					}
				case *ast.FuncDecl:
					if d.Name.Name == "routes" && d.Recv != nil {
						routes = d
					}
				}
			}
		}
	}
	if routes == nil {
		t.Fatal("internal/httpapi: no routes method")
	}
	served := map[string][]string{}
	ast.Inspect(routes, func(n ast.Node) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok || len(lit.Elts) < 3 {
			return true
		}
		group, ok1 := lit.Elts[0].(*ast.Ident)
		method, ok2 := lit.Elts[1].(*ast.BasicLit)
		pattern, ok3 := lit.Elts[2].(*ast.BasicLit)
		if !ok1 || !ok2 || !ok3 {
			return true
		}
		g, ok := consts[group.Name]
		if !ok {
			t.Errorf("internal/httpapi: route group %s is not a string constant", group.Name)
			return false
		}
		m, _ := strconv.Unquote(method.Value)
		p, _ := strconv.Unquote(pattern.Value)
		served[g] = append(served[g], m+" "+p)
		return false
	})
	if len(served) == 0 {
		t.Fatal("internal/httpapi: no routes found in routes()")
	}
	return served
}

// functionGroup reads the route group functions/<dir>/main.go serves
// (api.Serve([]string{httpapi.GroupX}, ...)).
func functionGroup(t *testing.T, dir string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot, "functions", dir, "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := bytes.Cut(src, []byte("httpapi.Group"))
	if !ok {
		t.Fatalf("functions/%s/main.go serves no httpapi group", dir)
	}
	name := "Group"
	for _, c := range after {
		if c < 'A' || c > 'z' || (c > 'Z' && c < 'a') {
			break
		}
		name += string(c)
	}
	group := strings.ToLower(strings.TrimPrefix(name, "Group"))
	return group
}

func TestHttpAPI(t *testing.T) {
	s := synth(t)
	cdkAssert(t, func() {
		s.template.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Api"), map[string]any{"ProtocolType": "HTTP"})
	})
	cdkAssert(t, func() {
		s.template.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Stage"), map[string]any{
			"ApiId": ref("HttpApi"), "StageName": "$default", "AutoDeploy": true,
		})
	})
	outputs := s.json["Outputs"].(map[string]any)
	want := map[string]any{
		"BaseUrl":              map[string]any{"Fn::Join": []any{"", []any{getAtt("HttpApi", "ApiEndpoint"), "/api/v1"}}},
		"PublicBaseUrl":        getAtt("HttpApi", "ApiEndpoint"),
		"TableName":            ref("Table"),
		"DeliveryQueueUrl":     ref("DeliveryQueue"),
		"RetryStateMachineArn": ref("RetryStateMachine"),
	}
	for name, value := range want {
		o, ok := outputs[name].(map[string]any)
		if !ok {
			t.Errorf("no output %s", name)
			continue
		}
		if !reflect.DeepEqual(o["Value"], value) {
			t.Errorf("output %s = %s, want %s", name, jsonString(o["Value"]), jsonString(value))
		}
	}
}

func TestParameters(t *testing.T) {
	s := synth(t)
	params := s.json["Parameters"].(map[string]any)
	for name, def := range map[string]float64{"RateLimit": 100, "ApplicationRateLimit": 10, "ClickRateLimit": 60, "DeliverMaxConcurrency": 50} {
		p, ok := params[name].(map[string]any)
		if !ok || p["Type"] != "Number" || p["Default"] != def {
			t.Errorf("parameter %s = %v, want a Number defaulting to %v", name, p, def)
		}
	}
	// What an SQS event source's MaximumConcurrency accepts.
	if p := params["DeliverMaxConcurrency"].(map[string]any); p["MinValue"] != 2.0 || p["MaxValue"] != 1000.0 {
		t.Errorf("DeliverMaxConcurrency = %v, want MinValue 2, MaxValue 1000", p)
	}
	// The context of the CDK app sets the defaults.
	code := tempDir(t, "code")
	if err := WritePlaceholderCode(code); err != nil {
		t.Fatal(err)
	}
	o, err := synthesize(tempDir(t, "cdk.out"), &TallyStackProps{RepoRoot: repoRoot, PlaceholderCode: code, RateLimit: 250, ApplicationRateLimit: 3, DeliverMaxConcurrency: 200})
	if err != nil {
		t.Fatal(err)
	}
	cdkAssert(t, func() {
		o.template.HasParameter(jsii.String("RateLimit"), map[string]any{"Type": "Number", "Default": 250})
	})
	cdkAssert(t, func() {
		o.template.HasParameter(jsii.String("ApplicationRateLimit"), map[string]any{"Type": "Number", "Default": 3})
	})
	cdkAssert(t, func() {
		o.template.HasParameter(jsii.String("DeliverMaxConcurrency"), map[string]any{"Type": "Number", "Default": 200})
	})
}

func TestTable(t *testing.T) {
	s := synth(t)
	p := s.props(t, "AWS::DynamoDB::Table", "Table")
	want := map[string]any{
		"BillingMode":                      "PAY_PER_REQUEST",
		"KeySchema":                        keySchema("pk", "sk"),
		"TimeToLiveSpecification":          map[string]any{"AttributeName": "ttl", "Enabled": true},
		"StreamSpecification":              map[string]any{"StreamViewType": "NEW_IMAGE"},
		"PointInTimeRecoverySpecification": map[string]any{"PointInTimeRecoveryEnabled": true},
		"DeletionProtectionEnabled":        ref("TableDeletionProtection"),
	}
	// Pre-warmed when the parameters ask (writes set it, reads only with them).
	warm := func(prefix string) map[string]any {
		return map[string]any{"Fn::If": []any{"Has" + prefix + "WarmThroughput", map[string]any{
			"WriteUnitsPerSecond": ref(prefix + "WarmWriteUnitsPerSecond"),
			"ReadUnitsPerSecond":  map[string]any{"Fn::If": []any{"Has" + prefix + "WarmReads", ref(prefix + "WarmReadUnitsPerSecond"), ref("AWS::NoValue")}},
		}, ref("AWS::NoValue")}}
	}
	want["WarmThroughput"] = warm("Table")
	var attrs, gsis []any
	for _, a := range []string{"pk", "sk", "gsi1pk", "gsi1sk", "gsi2pk", "gsi2sk", "gsi3pk", "gsi3sk"} {
		attrs = append(attrs, map[string]any{"AttributeName": a, "AttributeType": "S"})
	}
	for _, n := range []string{"1", "2", "3"} {
		proj := map[string]any{"ProjectionType": "ALL"}
		if n != "3" {
			proj = map[string]any{"ProjectionType": "INCLUDE", "NonKeyAttributes": []any{"data", "conversionId", "lastUsedMs"}}
		}
		gsis = append(gsis, map[string]any{
			"IndexName":      "gsi" + n,
			"KeySchema":      keySchema("gsi"+n+"pk", "gsi"+n+"sk"),
			"Projection":     proj,
			"WarmThroughput": warm("Index"),
		})
	}
	want["AttributeDefinitions"] = attrs
	want["GlobalSecondaryIndexes"] = gsis
	if !reflect.DeepEqual(p, want) {
		t.Errorf("table:\n got %s\nwant %s", jsonString(p), jsonString(want))
	}
	cdkAssert(t, func() {
		s.template.HasResource(jsii.String("AWS::DynamoDB::Table"), map[string]any{"DeletionPolicy": "Retain"})
	})
}

func keySchema(hash, rng string) []any {
	return []any{
		map[string]any{"AttributeName": hash, "KeyType": "HASH"},
		map[string]any{"AttributeName": rng, "KeyType": "RANGE"},
	}
}

func TestQueues(t *testing.T) {
	s := synth(t)
	q := s.props(t, "AWS::SQS::Queue", "DeliveryQueue")
	want := map[string]any{
		"VisibilityTimeout":      180.0,
		"MessageRetentionPeriod": 4 * 86400.0,
		"RedrivePolicy":          map[string]any{"deadLetterTargetArn": getAtt("DeliveryDLQ", "Arn"), "maxReceiveCount": 5.0},
		"SqsManagedSseEnabled":   true, // messages carry receivers' URLs
	}
	if !reflect.DeepEqual(q, want) {
		t.Errorf("DeliveryQueue = %s, want %s", jsonString(q), jsonString(want))
	}
	// A message stays invisible for at least 3 deliver timeouts (docs/aws.md
	// says "90 s > 30 s × 3"; it is equal).
	if v := q["VisibilityTimeout"].(float64); v < 6*timeouts["DeliverFunction"] {
		t.Errorf("visibility timeout %v s is below 6 × the deliver timeout", v)
	}
	for _, id := range []string{"DeliveryDLQ", "FanoutDLQ", "RollupDLQ"} {
		if p, want := s.props(t, "AWS::SQS::Queue", id), map[string]any{"MessageRetentionPeriod": 14 * 86400.0, "SqsManagedSseEnabled": true}; !reflect.DeepEqual(p, want) {
			t.Errorf("%s = %s, want %s", id, jsonString(p), jsonString(want))
		}
	}
}

// TestStateMachine checks the retry workflow runs statemachine/retry.asl.json
// as it is, its one substitution naming the attempt function.
func TestStateMachine(t *testing.T) {
	s := synth(t)
	p := s.props(t, "AWS::StepFunctions::StateMachine", "RetryStateMachine")
	if p["StateMachineType"] != "STANDARD" {
		t.Errorf("type %v, want STANDARD", p["StateMachineType"])
	}
	subs := map[string]any{"AttemptFunctionArn": getAtt("AttemptFunction", "Arn")}
	if !reflect.DeepEqual(p["DefinitionSubstitutions"], any(subs)) {
		t.Errorf("substitutions %s, want %s", jsonString(p["DefinitionSubstitutions"]), jsonString(subs))
	}
	loc, _ := p["DefinitionS3Location"].(map[string]any)
	key, _ := loc["Key"].(string)
	staged, err := os.ReadFile(assetPath(t, s.assembly, key))
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(filepath.Join(repoRoot, "statemachine", "retry.asl.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(staged, file) {
		t.Error("the deployed definition differs from statemachine/retry.asl.json")
	}

	// Resolved, every task invokes the attempt function, and nothing is
	// left to substitute.
	resolved := string(file)
	for name := range subs {
		resolved = strings.ReplaceAll(resolved, "${"+name+"}", "arn:aws:lambda:eu-west-1:123456789012:function:AttemptFunction")
	}
	if i := strings.Index(resolved, "${"); i >= 0 {
		t.Errorf("unsubstituted variable in the definition: %.40s", resolved[i:])
	}
	var def struct {
		States map[string]struct {
			Type       string
			Resource   string
			Parameters map[string]any
		}
	}
	if err := json.Unmarshal([]byte(resolved), &def); err != nil {
		t.Fatal(err)
	}
	tasks := 0
	for name, st := range def.States {
		if st.Type != "Task" {
			continue
		}
		tasks++
		if st.Resource != "arn:aws:states:::lambda:invoke" || st.Parameters["FunctionName"] != "arn:aws:lambda:eu-west-1:123456789012:function:AttemptFunction" {
			t.Errorf("state %s: resource %s, function %v", name, st.Resource, st.Parameters["FunctionName"])
		}
	}
	if tasks == 0 {
		t.Error("the definition has no Task state")
	}
}

// assetPath is the staged file of the asset uploaded under key.
func assetPath(t *testing.T, assembly, key string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(assembly, "TallyStack.assets.json"))
	if err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		Files map[string]struct {
			Source       struct{ Path string }
			Destinations map[string]struct{ ObjectKey string }
		}
	}
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	for _, f := range manifest.Files {
		for _, d := range f.Destinations {
			if d.ObjectKey == key {
				return filepath.Join(assembly, f.Source.Path)
			}
		}
	}
	t.Fatalf("no asset with key %q", key)
	return ""
}

func TestSchedule(t *testing.T) {
	s := synth(t)
	for rule, want := range map[string]string{"ApproverSchedule": "rate(1 minute)", "ReconcilerSchedule": "rate(5 minutes)"} {
		fn := schedules[rule]
		p := s.props(t, "AWS::Events::Rule", rule)
		if p["ScheduleExpression"] != want || p["State"] != "ENABLED" {
			t.Errorf("%s: schedule %v, state %v; want %s", rule, p["ScheduleExpression"], p["State"], want)
		}
		targets, _ := p["Targets"].([]any)
		if len(targets) != 1 || !reflect.DeepEqual(targets[0].(map[string]any)["Arn"], getAtt(fn, "Arn")) {
			t.Errorf("%s: targets %s, want %s", rule, jsonString(targets), fn)
		}
		cdkAssert(t, func() {
			s.template.HasResourceProperties(jsii.String("AWS::Lambda::Permission"), map[string]any{
				"Action":       "lambda:InvokeFunction",
				"FunctionName": getAtt(fn, "Arn"),
				"Principal":    "events.amazonaws.com",
				"SourceArn":    getAtt(rule, "Arn"),
			})
		})
	}
}

func TestAlarms(t *testing.T) {
	s := synth(t)
	alarm := func(namespace, metric, dimension string, value any, statistic string, threshold float64) map[string]any {
		return map[string]any{
			"Namespace": namespace, "MetricName": metric,
			"Dimensions":         []any{map[string]any{"Name": dimension, "Value": value}},
			"Statistic":          statistic,
			"Period":             300.0,
			"EvaluationPeriods":  1.0,
			"Threshold":          threshold,
			"ComparisonOperator": "GreaterThanThreshold",
			"TreatMissingData":   "notBreaching",
			"AlarmActions":       []any{ref("AlarmTopic")},
		}
	}
	// Every alarm also says when it clears.
	want := map[string]map[string]any{
		"ApiServerErrorsAlarm":          alarm("AWS/ApiGateway", "5xx", "ApiId", ref("HttpApi"), "Sum", 0),
		"DeliveryDLQAlarm":              alarm("AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", getAtt("DeliveryDLQ", "QueueName"), "Maximum", 0),
		"FanoutDLQAlarm":                alarm("AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", getAtt("FanoutDLQ", "QueueName"), "Maximum", 0),
		"RetryFailedExecutionsAlarm":    alarm("AWS/States", "ExecutionsFailed", "StateMachineArn", ref("RetryStateMachine"), "Sum", 0),
		"RetryTimedOutExecutionsAlarm":  alarm("AWS/States", "ExecutionsTimedOut", "StateMachineArn", ref("RetryStateMachine"), "Sum", 0),
		"RetryThrottledExecutionsAlarm": alarm("AWS/States", "ExecutionThrottled", "StateMachineArn", ref("RetryStateMachine"), "Sum", 0),
		"RetryAbortedExecutionsAlarm":   alarm("AWS/States", "ExecutionsAborted", "StateMachineArn", ref("RetryStateMachine"), "Sum", 0),
		"FanoutIteratorAgeAlarm":        alarm("AWS/Lambda", "IteratorAge", "FunctionName", ref("FanoutFunction"), "Maximum", 300000),
		"RollupIteratorAgeAlarm":        alarm("AWS/Lambda", "IteratorAge", "FunctionName", ref("RollupFunction"), "Maximum", 300000),
		"DeliveryQueueAgeAlarm":         alarm("AWS/SQS", "ApproximateAgeOfOldestMessage", "QueueName", getAtt("DeliveryQueue", "QueueName"), "Maximum", 600),
		"RollupDLQAlarm":                alarm("AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", getAtt("RollupDLQ", "QueueName"), "Maximum", 0),
		"ReconcilerDeferralsAlarm":      alarm("Tally", "ReconcilerDeferrals", "FunctionName", ref("ReconcilerFunction"), "Sum", 0),
	}
	for id := range timeouts {
		want[id+"ErrorsAlarm"] = alarm("AWS/Lambda", "Errors", "FunctionName", ref(id), "Sum", 0)
	}
	for _, id := range []string{"ApproverFunction", "ReconcilerFunction"} { // reserved concurrency
		want[id+"ThrottlesAlarm"] = alarm("AWS/Lambda", "Throttles", "FunctionName", ref(id), "Sum", 0)
	}
	// The others share the account's concurrency: one alarm over them all.
	want["LambdaThrottlesAlarm"] = alarm("AWS/Lambda", "Throttles", "", nil, "Sum", 0)
	delete(want["LambdaThrottlesAlarm"], "Dimensions")
	if got := len(s.resources("AWS::CloudWatch::Alarm")); got != len(want)+1 { // and TableThrottlesAlarm
		t.Errorf("%d alarms, want %d", got, len(want)+1)
	}
	for id, want := range want {
		want["OKActions"] = want["AlarmActions"]
		p := s.props(t, "AWS::CloudWatch::Alarm", id)
		delete(p, "AlarmDescription")
		if !reflect.DeepEqual(p, want) {
			t.Errorf("%s:\n got %s\nwant %s", id, jsonString(p), jsonString(want))
		}
	}
}

func TestEventSourceMappings(t *testing.T) {
	s := synth(t)
	var stream, rollup, queue map[string]any
	for id, r := range s.resources("AWS::Lambda::EventSourceMapping") {
		p := r["Properties"].(map[string]any)
		switch {
		case reflect.DeepEqual(p["FunctionName"], ref("FanoutFunction")):
			stream = p
		case reflect.DeepEqual(p["FunctionName"], ref("RollupFunction")):
			rollup = p
		case reflect.DeepEqual(p["FunctionName"], ref("DeliverFunction")):
			queue = p
		default:
			t.Errorf("unexpected event source mapping %s: %s", id, jsonString(p))
		}
	}
	if stream == nil || rollup == nil || queue == nil {
		t.Fatalf("event source mappings: stream %v, rollup %v, queue %v", stream, rollup, queue)
	}

	// The filter patterns are JSON; compare them as such.
	for _, m := range []struct {
		mapping  map[string]any
		patterns []string
	}{
		{stream, []string{
			`{"eventName":["INSERT"],"dynamodb":{"Keys":{"pk":{"S":[{"prefix":"EVT#"}]}},"NewImage":{"outbox":{"S":[{"exists":false}]}}}}`,
			`{"eventName":["INSERT"],"dynamodb":{"NewImage":{"fanout":{"S":["stream"]}}}}`,
		}},
		{rollup, []string{`{"eventName":["INSERT"],"dynamodb":{"NewImage":{"rollup":{"S":["stream"]}}}}`}},
	} {
		filters := m.mapping["FilterCriteria"].(map[string]any)["Filters"].([]any)
		if len(filters) != len(m.patterns) {
			t.Fatalf("filters %s, want %d", jsonString(filters), len(m.patterns))
		}
		for i, pattern := range m.patterns {
			var got, want any
			if err := json.Unmarshal([]byte(filters[i].(map[string]any)["Pattern"].(string)), &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(pattern), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("filter pattern %s, want %s", jsonString(got), jsonString(want))
			}
		}
		delete(m.mapping, "FilterCriteria")
	}
	wantRollup := map[string]any{
		"FunctionName":                   ref("RollupFunction"),
		"EventSourceArn":                 getAtt("Table", "StreamArn"),
		"BatchSize":                      1000.0,
		"MaximumBatchingWindowInSeconds": 15.0,
		"StartingPosition":               "TRIM_HORIZON",
		"BisectBatchOnFunctionError":     true,
		"MaximumRetryAttempts":           10.0,
		"MaximumRecordAgeInSeconds":      21600.0,
		"FunctionResponseTypes":          []any{"ReportBatchItemFailures"},
		"DestinationConfig":              map[string]any{"OnFailure": map[string]any{"Destination": getAtt("RollupDLQ", "Arn")}},
		"TumblingWindowInSeconds":        60.0,
	}
	if !reflect.DeepEqual(rollup, wantRollup) {
		t.Errorf("rollup mapping:\n got %s\nwant %s", jsonString(rollup), jsonString(wantRollup))
	}
	wantStream := map[string]any{
		"FunctionName":               ref("FanoutFunction"),
		"EventSourceArn":             getAtt("Table", "StreamArn"),
		"BatchSize":                  100.0,
		"StartingPosition":           "LATEST",
		"BisectBatchOnFunctionError": true,
		"MaximumRetryAttempts":       10.0,
		"MaximumRecordAgeInSeconds":  21600.0,
		"FunctionResponseTypes":      []any{"ReportBatchItemFailures"},
		"DestinationConfig":          map[string]any{"OnFailure": map[string]any{"Destination": getAtt("FanoutDLQ", "Arn")}},
	}
	if !reflect.DeepEqual(stream, wantStream) {
		t.Errorf("stream mapping:\n got %s\nwant %s", jsonString(stream), jsonString(wantStream))
	}
	wantQueue := map[string]any{
		"FunctionName":          ref("DeliverFunction"),
		"EventSourceArn":        getAtt("DeliveryQueue", "Arn"),
		"BatchSize":             10.0,
		"FunctionResponseTypes": []any{"ReportBatchItemFailures"},
		"ScalingConfig":         map[string]any{"MaximumConcurrency": ref("DeliverMaxConcurrency")},
	}
	if !reflect.DeepEqual(queue, wantQueue) {
		t.Errorf("queue mapping:\n got %s\nwant %s", jsonString(queue), jsonString(wantQueue))
	}
	// CDK's assertion language says the same about the bisect and the
	// partial batch responses.
	cdkAssert(t, func() {
		s.template.HasResourceProperties(jsii.String("AWS::Lambda::EventSourceMapping"), map[string]any{
			"BisectBatchOnFunctionError": true,
			"FunctionResponseTypes":      assertions.Match_ArrayWith(&[]any{"ReportBatchItemFailures"}),
		})
	})
}

// TestLeastPrivilege checks every permission of every role (docs/aws.md
// "Least privilege"): the actions each kind of function uses, on the
// resources it uses, and nothing else: no managed policy, nothing on "*".
func TestLeastPrivilege(t *testing.T) {
	s := synth(t)
	f := facts(t, newCDKTemplate(s))
	want := map[string]string{}
	for id := range timeouts {
		want["grant "+id+" "+id+"LogGroup"] = "logs:CreateLogStream logs:PutLogEvents"
		if slices.Contains(apiFunctions, id) && id != "ReportsFunction" && id != "HealthFunction" {
			// Writes only in the partitions of its writeKeys.
			actions := []string{"dynamodb:ConditionCheckItem", "dynamodb:GetItem", "dynamodb:Query"}
			for action, keys := range writeKeys[id] {
				actions = append(actions, action+" if "+leadingKeys(t, keys))
			}
			slices.Sort(actions)
			want["grant "+id+" Table"] = strings.Join(actions, " ")
			want["grant "+id+" Table/index"] = "dynamodb:Query"
		}
	}
	for _, id := range []string{"ReportsFunction", "HealthFunction", fallbackID} { // they only read, and count requests
		want["grant "+id+" Table"] = `dynamodb:GetItem dynamodb:Query dynamodb:UpdateItem if {"ForAllValues:StringLike":{"dynamodb:LeadingKeys":["RATE#*","KEY#*"]}}`
		want["grant "+id+" Table/index"] = "dynamodb:Query"
	}
	want["grant ApproverFunction Table"] = "dynamodb:GetItem dynamodb:PutItem dynamodb:UpdateItem"
	want["grant ApproverFunction Table/index"] = "dynamodb:Query"
	want["grant FanoutFunction Table"] = "dynamodb:GetItem dynamodb:PutItem dynamodb:Query"
	want["grant FanoutFunction Table/stream"] = "dynamodb:DescribeStream dynamodb:GetRecords dynamodb:GetShardIterator dynamodb:ListStreams"
	want["grant FanoutFunction FanoutDLQ"] = "sqs:SendMessage" // the stream's on-failure destination
	want["grant RollupFunction RollupDLQ"] = "sqs:SendMessage"
	want["grant RollupFunction Table"] = "dynamodb:GetItem dynamodb:PutItem dynamodb:UpdateItem"
	want["grant RollupFunction Table/stream"] = "dynamodb:DescribeStream dynamodb:GetRecords dynamodb:GetShardIterator dynamodb:ListStreams"
	want["grant DeliverFunction Table"] = "dynamodb:GetItem dynamodb:PutItem dynamodb:UpdateItem"
	want["grant DeliverFunction DeliveryQueue"] = "sqs:DeleteMessage sqs:GetQueueAttributes sqs:ReceiveMessage sqs:SendMessage" // and paced deliveries back
	want["grant DeliverFunction RetryStateMachine"] = "states:StartExecution"
	want["grant DeliverFunction RetryStateMachine/executions"] = "states:DescribeExecution"
	want["grant AttemptFunction Table"] = "dynamodb:GetItem dynamodb:PutItem dynamodb:UpdateItem"
	want["grant ReconcilerFunction Table"] = "dynamodb:GetItem dynamodb:PutItem dynamodb:Query"
	want["grant ReconcilerFunction Table/index"] = "dynamodb:Query"
	want["grant ReconcilerFunction DeliveryQueue"] = "sqs:GetQueueAttributes sqs:SendMessage"
	want["grant ReconcilerFunction FanoutDLQ"] = "sqs:DeleteMessage sqs:ReceiveMessage sqs:SendMessage" // failed stream batches
	want["grant FanoutFunction DeliveryQueue"] = "sqs:SendMessage"
	want["grant DeliveriesFunction DeliveryQueue"] = "sqs:SendMessage"
	want["grant DashboardFunction DeliveryQueue"] = "sqs:SendMessage"
	want["grant RetryStateMachine AttemptFunction"] = "lambda:InvokeFunction"
	// The signing secrets: opened by those that sign, sealed by those that
	// set them, which may make the data key.
	want["grant WebhooksFunction SecretsKey"] = "kms:Decrypt kms:GenerateDataKey"
	want["grant DashboardFunction SecretsKey"] = "kms:Decrypt kms:GenerateDataKey"
	want["grant DeliverFunction SecretsKey"] = "kms:Decrypt"
	want["grant AttemptFunction SecretsKey"] = "kms:Decrypt"
	got := map[string]string{}
	for k, v := range f {
		if strings.HasPrefix(k, "grant ") {
			got[k] = v
		}
	}
	for _, d := range diffFacts(want, got, "contract", "stack") {
		t.Error(d)
	}
	for id, r := range s.resources("AWS::IAM::Policy") {
		for _, st := range r["Properties"].(map[string]any)["PolicyDocument"].(map[string]any)["Statement"].([]any) {
			if res := st.(map[string]any)["Resource"]; strings.Contains(jsonString(res), `"*"`) || res == "*" {
				t.Errorf("%s grants %v on %v", id, st.(map[string]any)["Action"], res)
			}
		}
	}
	for id, r := range s.resources("AWS::IAM::Role") {
		if p := r["Properties"].(map[string]any); p["ManagedPolicyArns"] != nil || p["Policies"] != nil {
			t.Errorf("role %s has managed or inline policies %v", id, jsonString(p))
		}
	}
}

// TestFunctionCode checks functions deploy bin/<folder>, the output of
// make build, and that synthesis without it names the fix.
func TestFunctionCode(t *testing.T) {
	bin := tempDir(t, "bin")
	for _, f := range functions {
		if err := os.MkdirAll(filepath.Join(bin, f.Dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bin, f.Dir, "bootstrap"), []byte("binary of "+f.Dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s, err := synthesize(tempDir(t, "cdk.out"), &TallyStackProps{RepoRoot: repoRoot, BinDir: bin})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range functions {
		code := s.props(t, "AWS::Lambda::Function", f.ID)["Code"].(map[string]any)
		key, _ := code["S3Key"].(string)
		staged, err := os.ReadFile(filepath.Join(assetPath(t, s.assembly, key), "bootstrap"))
		if err != nil {
			t.Errorf("%s: %v", f.ID, err)
			continue
		}
		if want := "binary of " + f.Dir; string(staged) != want {
			t.Errorf("%s deploys %q, want %q", f.ID, staged, want)
		}
	}

	if err := os.Remove(filepath.Join(bin, "fanout", "bootstrap")); err != nil {
		t.Fatal(err)
	}
	_, err = NewTallyStack(awscdk.NewApp(nil), "TallyStack", &TallyStackProps{RepoRoot: repoRoot, BinDir: bin})
	// The hint works from where `go run .` runs: make build is in the
	// repository root, and -c is a flag of the cdk CLI, not of go run.
	if err == nil || !strings.Contains(err.Error(), "cd .. && make build") || !strings.Contains(err.Error(), "TALLY_CDK_PLACEHOLDER_CODE=1 go run .") ||
		!strings.Contains(err.Error(), "fanout") {
		t.Errorf("without bin/fanout/bootstrap: err %v, want one naming make build in the root, the placeholder variable and fanout", err)
	}
}

func jsonString(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// cdkAssert runs CDK assertions, which panic on a mismatch, as a test
// error.
func cdkAssert(t *testing.T, assertion func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%v", r)
		}
	}()
	assertion()
}

// leadingKeys is the condition that lets a write name only the partitions
// of patterns, as the facts show it.
func leadingKeys(t *testing.T, patterns []string) string {
	t.Helper()
	if len(patterns) == 0 {
		t.Fatal("no writeKeys")
	}
	b, err := json.Marshal(map[string]any{"ForAllValues:StringLike": map[string]any{"dynamodb:LeadingKeys": patterns}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
