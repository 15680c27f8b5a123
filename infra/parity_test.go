package main

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// samTemplate is the SAM template the parity test compares the stack with.
var samTemplate = filepath.Join(repoRoot, "template.yaml")

// TestParity checks that the CDK stack and template.yaml (SAM) describe the
// same deployment: the functions (runtime, architecture, handler, memory,
// timeout, environment and what it points at), the routes, the table, the
// queues and their redrive, the state machine (definition file and
// substitutions), the schedule, the event source mappings, the alarms, the
// outputs, the parameters those use, and what each function and the state
// machine may do to the table, the queues, the state machine and the
// attempt function. It lists every difference.
func TestParity(t *testing.T) {
	if _, err := os.Stat(samTemplate); errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s does not exist: the parity test compares the stack with it", samTemplate)
	}
	sam, err := loadSAMTemplate(samTemplate)
	if err != nil {
		t.Fatal(err)
	}
	cdk := facts(t, newCDKTemplate(synth(t)))
	want := facts(t, sam)
	diffs := diffFacts(cdk, want, "cdk", "sam")
	if len(diffs) > 0 {
		t.Errorf("the CDK stack and template.yaml differ in %d facts:\n%s", len(diffs), strings.Join(diffs, "\n"))
	}
	if testing.Verbose() {
		t.Logf("%d facts compared", len(cdk))
	}
}

// TestParityWarmThroughput compares the two with the table and its
// indexes pre-warmed (TestParity sees the defaults, which set none).
func TestParityWarmThroughput(t *testing.T) {
	for _, params := range []map[string]any{
		{"TableWarmWriteUnitsPerSecond": 80000, "IndexWarmWriteUnitsPerSecond": 25000},
		{"TableWarmWriteUnitsPerSecond": 80000, "TableWarmReadUnitsPerSecond": 80000, "IndexWarmWriteUnitsPerSecond": 25000, "IndexWarmReadUnitsPerSecond": 12000},
	} {
		sam, err := loadSAMTemplate(samTemplate, params)
		if err != nil {
			t.Fatal(err)
		}
		cdk, want := facts(t, newCDKTemplate(synth(t), params)), facts(t, sam)
		if diffs := diffFacts(cdk, want, "cdk", "sam"); len(diffs) > 0 {
			t.Errorf("with %v, the CDK stack and template.yaml differ in %d facts:\n%s", params, len(diffs), strings.Join(diffs, "\n"))
		}
		for fact, param := range map[string]string{"table Table warm": "TableWarm", "table Table index gsi3": "IndexWarm"} {
			for _, units := range []string{"Write", "Read"} {
				name := param + units + "UnitsPerSecond"
				if got := want[fact]; strings.Contains(got, "${"+name+"}") != (params[name] != nil) {
					t.Errorf("with %v: %s = %q; want ${%s} only when it is set", params, fact, got, name)
				}
			}
		}
	}
}

// TestParityCatchesDifferences checks the comparison sees a difference in
// each kind of fact, on edited copies of the synthesized template.
func TestParityCatchesDifferences(t *testing.T) {
	s := synth(t)
	base := facts(t, newCDKTemplate(s))
	// find returns the properties of the one resource of type typ that
	// match (nil: any).
	find := func(doc map[string]any, typ string, match func(p map[string]any) bool) map[string]any {
		for _, r := range doc["Resources"].(map[string]any) {
			r := r.(map[string]any)
			if p, _ := r["Properties"].(map[string]any); r["Type"] == typ && (match == nil || match(p)) {
				return p
			}
		}
		t.Fatalf("no %s to edit", typ)
		return nil
	}
	named := func(doc map[string]any, id string) map[string]any {
		return doc["Resources"].(map[string]any)[id].(map[string]any)["Properties"].(map[string]any)
	}
	for _, c := range []struct {
		fact string
		edit func(doc map[string]any)
	}{
		{"function DeliverFunction timeout", func(doc map[string]any) { named(doc, "DeliverFunction")["Timeout"] = 31.0 }},
		{"function DeliveriesFunction env TALLY_DELIVERY_QUEUE_URL", func(doc map[string]any) {
			named(doc, "DeliveriesFunction")["Environment"].(map[string]any)["Variables"].(map[string]any)["TALLY_DELIVERY_QUEUE_URL"] = ref("DeliveryDLQ")
		}},
		{"function FanoutFunction env", func(doc map[string]any) {
			named(doc, "FanoutFunction")["Environment"].(map[string]any)["Variables"].(map[string]any)["EXTRA"] = "1"
		}},
		{"route GET /api/v1/reports", func(doc map[string]any) {
			find(doc, "AWS::ApiGatewayV2::Route", func(p map[string]any) bool { return p["RouteKey"] == "GET /api/v1/reports" })["RouteKey"] = "GET /api/v1/report"
		}},
		{"route $default", func(doc map[string]any) {
			find(doc, "AWS::ApiGatewayV2::Route", func(p map[string]any) bool { return p["RouteKey"] == "$default" })["RouteKey"] = "ANY /{proxy+}"
		}},
		{"grant FallbackFunction RetryStateMachine", func(doc map[string]any) {
			st := find(doc, "AWS::IAM::Policy", func(p map[string]any) bool { return strings.Contains(jsonString(p), "states:StartExecution") })
			role := named(doc, "FallbackFunction")["Role"].(map[string]any)["Fn::GetAtt"].([]any)[0].(string)
			st["Roles"] = append(st["Roles"].([]any), ref(role))
		}},
		{"queue DeliveryQueue redrive", func(doc map[string]any) {
			named(doc, "DeliveryQueue")["RedrivePolicy"].(map[string]any)["maxReceiveCount"] = 6.0
		}},
		{"table Table ttl", func(doc map[string]any) {
			named(doc, "Table")["TimeToLiveSpecification"].(map[string]any)["AttributeName"] = "expires"
		}},
		{"table Table index gsi2", func(doc map[string]any) {
			named(doc, "Table")["GlobalSecondaryIndexes"].([]any)[1].(map[string]any)["Projection"] = map[string]any{"ProjectionType": "KEYS_ONLY"}
		}},
		{"eventsource FanoutFunction ${Table.StreamArn}", func(doc map[string]any) {
			find(doc, "AWS::Lambda::EventSourceMapping", func(p map[string]any) bool {
				return p["BisectBatchOnFunctionError"] == true && reflect.DeepEqual(p["FunctionName"], ref("FanoutFunction"))
			})["BisectBatchOnFunctionError"] = false
		}},
		{"statemachine RetryStateMachine substitution AttemptFunctionArn", func(doc map[string]any) {
			named(doc, "RetryStateMachine")["DefinitionSubstitutions"] = map[string]any{"AttemptFunctionArn": getAtt("DeliverFunction", "Arn")}
		}},
		{"schedule ApproverFunction", func(doc map[string]any) { named(doc, "ApproverSchedule")["ScheduleExpression"] = "rate(2 minutes)" }},
		{"alarm FanoutDLQAlarm", func(doc map[string]any) { named(doc, "FanoutDLQAlarm")["Threshold"] = 1.0 }},
		{"grant ReportsFunction Table", func(doc map[string]any) {
			role := jsonString(ref(named(doc, "ReportsFunction")["Role"].(map[string]any)["Fn::GetAtt"].([]any)[0].(string)))
			st := find(doc, "AWS::IAM::Policy", func(p map[string]any) bool {
				return strings.Contains(jsonString(p["Roles"]), role)
			})["PolicyDocument"].(map[string]any)["Statement"].([]any)
			for _, s := range st {
				if a, ok := s.(map[string]any)["Action"].([]any); ok && slices.Contains(a, any("dynamodb:GetItem")) {
					s.(map[string]any)["Action"] = append(a, "dynamodb:PutItem")
				}
			}
		}},
		{"grant DeliverFunction RetryStateMachine/executions", func(doc map[string]any) {
			st := find(doc, "AWS::IAM::Policy", func(p map[string]any) bool {
				return strings.Contains(jsonString(p), "states:DescribeExecution")
			})["PolicyDocument"].(map[string]any)["Statement"].([]any)
			for _, s := range st {
				if s.(map[string]any)["Action"] == "states:DescribeExecution" {
					s.(map[string]any)["Action"] = []any{"states:DescribeExecution", "states:StopExecution"}
				}
			}
		}},
		{"grant AttemptFunction managed", func(doc map[string]any) {
			named(doc, "AttemptFunctionRole")["ManagedPolicyArns"] = []any{"arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"}
		}},
		{"loggroup OffersFunctionLogGroup", func(doc map[string]any) { named(doc, "OffersFunctionLogGroup")["RetentionInDays"] = 7.0 }},
		{"function OffersFunction logs", func(doc map[string]any) {
			named(doc, "OffersFunction")["LoggingConfig"] = map[string]any{"LogGroup": ref("ReportsFunctionLogGroup")}
		}},
		{"function ApproverFunction reserved", func(doc map[string]any) { delete(named(doc, "ApproverFunction"), "ReservedConcurrentExecutions") }},
		{"api HttpApi throttle", func(doc map[string]any) {
			find(doc, "AWS::ApiGatewayV2::Stage", nil)["DefaultRouteSettings"] = map[string]any{"ThrottlingRateLimit": 5.0}
		}},
		{"api HttpApi throttle POST /api/v1/conversions", func(doc map[string]any) {
			rs := find(doc, "AWS::ApiGatewayV2::Stage", nil)["RouteSettings"].(map[string]any)
			rs["POST /api/v1/conversions"] = rs["GET /c/{offerId}"]
		}},
		{"parameter DeliverMaxConcurrency", func(doc map[string]any) {
			doc["Parameters"].(map[string]any)["DeliverMaxConcurrency"].(map[string]any)["MaxValue"] = 500.0
		}},
		{"alarm DeliveryQueueAgeAlarm", func(doc map[string]any) { delete(named(doc, "DeliveryQueueAgeAlarm"), "AlarmActions") }},
		{"output BaseUrl", func(doc map[string]any) {
			doc["Outputs"].(map[string]any)["BaseUrl"].(map[string]any)["Value"] = getAtt("HttpApi", "ApiEndpoint")
		}},
	} {
		var doc map[string]any
		if err := json.Unmarshal([]byte(jsonString(s.json)), &doc); err != nil {
			t.Fatal(err)
		}
		c.edit(doc)
		edited := *s
		edited.json = doc
		diffs := diffFacts(base, facts(t, newCDKTemplate(&edited)), "before", "after")
		found := false
		for _, d := range diffs {
			found = found || strings.HasPrefix(d, c.fact+":")
		}
		if !found {
			t.Errorf("editing %s: no difference in it, only %q", c.fact, diffs)
		}
	}
}

// TestSAMReading checks the SAM side of the comparison on a small
// template: short-form intrinsics, Globals, conditions at the parameters'
// defaults, policy templates and events.
func TestSAMReading(t *testing.T) {
	const src = `
Transform: AWS::Serverless-2016-10-31
Parameters:
  Endpoint: {Type: String, Default: ""}
  Limit: {Type: Number, Default: 7}
Conditions:
  HasEndpoint: !Not [!Equals [!Ref Endpoint, ""]]
Globals:
  Function:
    Runtime: provided.al2023
    MemorySize: 512
    Environment:
      Variables:
        TABLE: !Ref Table
        ENDPOINT: !If [HasEndpoint, !Ref Endpoint, !Ref AWS::NoValue]
Resources:
  Table:
    Type: AWS::DynamoDB::Table
    Properties:
      AttributeDefinitions: [{AttributeName: pk, AttributeType: S}]
      KeySchema: [{AttributeName: pk, KeyType: HASH}]
  Queue:
    Type: AWS::SQS::Queue
  Only:
    Type: AWS::SQS::Queue
    Condition: HasEndpoint
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Handler: bootstrap
      Timeout: 9
      Environment:
        Variables:
          URL: !Ref Queue
          LIMIT: !Ref Limit
          SUB: !Sub "${Table.Arn}/x/${Queue}"
      Policies:
        - DynamoDBReadPolicy: {TableName: !Ref Table}
        - SQSSendMessagePolicy: {QueueName: !GetAtt Queue.QueueName}
      Events:
        Get:
          Type: HttpApi
          Properties: {Method: get, Path: /things}
        Unmatched:
          Type: HttpApi
          Properties: {Method: ANY, Path: $default}
        Tick:
          Type: Schedule
          Properties: {Schedule: rate(5 minutes), Enabled: false}
        Poll:
          Type: SQS
          Properties: {Queue: !GetAtt Queue.Arn}
Outputs:
  Url:
    Value: !Join ["", [!GetAtt Table.Arn, "/y"]]
`
	file := filepath.Join(t.TempDir(), "template.yaml")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	tmpl, err := loadSAMTemplate(file)
	if err != nil {
		t.Fatal(err)
	}
	got := facts(t, tmpl)
	want := map[string]string{
		"function Fn architectures":       "[x86_64]",
		"function Fn env":                 "LIMIT SUB TABLE URL",
		"function Fn env LIMIT":           "${Limit}",
		"function Fn env SUB":             "${Table.Arn}/x/${Queue.QueueUrl}",
		"function Fn env TABLE":           "${Table}",
		"function Fn env URL":             "${Queue.QueueUrl}",
		"function Fn handler":             "bootstrap",
		"function Fn memory":              "512",
		"function Fn runtime":             "provided.al2023",
		"function Fn timeout":             "9",
		"route GET /things":               "api=ServerlessHttpApi function=Fn payload=2.0",
		"route $default":                  "api=ServerlessHttpApi function=Fn payload=2.0",
		"schedule Fn":                     "rate(5 minutes) DISABLED",
		"eventsource Fn ${Queue.Arn}":     "batch=10 window=0 enabled=true responses=",
		"grant Fn Table":                  "dynamodb:BatchGetItem dynamodb:DescribeTable dynamodb:GetItem dynamodb:Query dynamodb:Scan",
		"grant Fn Table/index":            "dynamodb:BatchGetItem dynamodb:DescribeTable dynamodb:GetItem dynamodb:Query dynamodb:Scan",
		"function Fn logs":                "/aws/lambda/<name>",
		"function Fn log format":          "Text",
		"function Fn system log level":    "INFO",
		"function Fn reserved":            "unreserved",
		"grant Fn Queue":                  "sqs:SendMessage",
		"output Url":                      "${Table.Arn}/y",
		"parameter Limit":                 "Type=Number Default=7",
		"queue Queue redrive":             "",
		"queue Queue retention":           "345600",
		"queue Queue visibility":          "30",
		"queue Queue deletion":            "Delete replace=Delete",
		"resource Fn":                     "AWS::Lambda::Function",
		"resource Queue":                  "AWS::SQS::Queue",
		"resource Table":                  "AWS::DynamoDB::Table",
		"table Table billing":             "PROVISIONED",
		"table Table deletion policy":     "Delete",
		"table Table deletion protection": "false",
		"table Table keys":                "pk:S HASH",
		"table Table pitr":                "false",
		"table Table warm":                "none",
	}
	delete(want, "queue Queue redrive")
	for _, d := range diffFacts(want, got, "want", "got") {
		t.Error(d)
	}
}
