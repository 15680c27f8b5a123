package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2integrations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsstepfunctions"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// TallyStackProps configures the stack.
type TallyStackProps struct {
	awscdk.StackProps

	// RepoRoot is the repository's root directory: statemachine/ and, by
	// default, bin/ are under it.
	RepoRoot string
	// BinDir holds one folder per function with its bootstrap, as
	// `make build` leaves them. Empty means RepoRoot/bin.
	BinDir string
	// PlaceholderCode, when not empty, is one folder used as every
	// function's code instead of BinDir's: for synthesizing without arm64
	// binaries (tests, template diffs). Such a stack is not deployable.
	PlaceholderCode string

	// RateLimit and ApplicationRateLimit are the defaults of the template
	// parameters of the same names (0: 100 and 10).
	RateLimit            float64
	ApplicationRateLimit float64
}

// Default parameter values (docs/aws.md).
const (
	defaultRateLimit            = 100
	defaultApplicationRateLimit = 10
)

// NewTallyStack defines the whole service: the resources of docs/aws.md with
// their logical ids.
func NewTallyStack(scope constructs.Construct, id string, props *TallyStackProps) (awscdk.Stack, error) {
	if props == nil {
		props = &TallyStackProps{}
	}
	code, err := functionCode(props)
	if err != nil {
		return nil, err
	}
	definition := filepath.Join(props.RepoRoot, "statemachine", "retry.asl.json")
	if _, err := os.Stat(definition); err != nil {
		return nil, fmt.Errorf("state machine definition: %w", err)
	}

	stack := awscdk.NewStack(scope, jsii.String(id), &props.StackProps)

	rateLimit := awscdk.NewCfnParameter(stack, jsii.String("RateLimit"), &awscdk.CfnParameterProps{
		Type:        jsii.String("Number"),
		Default:     orDefault(props.RateLimit, defaultRateLimit),
		MinValue:    jsii.Number(1),
		Description: jsii.String("Requests per minute per API key (" + envRateLimit + ")."),
	})
	applicationRateLimit := awscdk.NewCfnParameter(stack, jsii.String("ApplicationRateLimit"), &awscdk.CfnParameterProps{
		Type:        jsii.String("Number"),
		Default:     orDefault(props.ApplicationRateLimit, defaultApplicationRateLimit),
		MinValue:    jsii.Number(1),
		Description: jsii.String("Partner applications per minute per client IP (" + envApplicationRateLimit + ")."),
	})

	// Storage: one table, its stream feeds the fan-out.
	table := awsdynamodb.NewTable(stack, jsii.String("Table"), &awsdynamodb.TableProps{
		PartitionKey:        &awsdynamodb.Attribute{Name: jsii.String("pk"), Type: awsdynamodb.AttributeType_STRING},
		SortKey:             &awsdynamodb.Attribute{Name: jsii.String("sk"), Type: awsdynamodb.AttributeType_STRING},
		BillingMode:         awsdynamodb.BillingMode_PAY_PER_REQUEST,
		TimeToLiveAttribute: jsii.String("ttl"),
		Stream:              awsdynamodb.StreamViewType_NEW_IMAGE,
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		RemovalPolicy: awscdk.RemovalPolicy_RETAIN,
	})
	for _, n := range []string{"1", "2", "3"} {
		table.AddGlobalSecondaryIndex(&awsdynamodb.GlobalSecondaryIndexProps{
			IndexName:      jsii.String("gsi" + n),
			PartitionKey:   &awsdynamodb.Attribute{Name: jsii.String("gsi" + n + "pk"), Type: awsdynamodb.AttributeType_STRING},
			SortKey:        &awsdynamodb.Attribute{Name: jsii.String("gsi" + n + "sk"), Type: awsdynamodb.AttributeType_STRING},
			ProjectionType: awsdynamodb.ProjectionType_ALL,
		})
	}
	overrideID(table, "Table")

	// Queues.
	fourteenDays := awscdk.Duration_Days(jsii.Number(14))
	deliveryDLQ := awssqs.NewQueue(stack, jsii.String("DeliveryDLQ"), &awssqs.QueueProps{RetentionPeriod: fourteenDays})
	overrideID(deliveryDLQ, "DeliveryDLQ")
	fanoutDLQ := awssqs.NewQueue(stack, jsii.String("FanoutDLQ"), &awssqs.QueueProps{RetentionPeriod: fourteenDays})
	overrideID(fanoutDLQ, "FanoutDLQ")
	deliveryQueue := awssqs.NewQueue(stack, jsii.String("DeliveryQueue"), &awssqs.QueueProps{
		VisibilityTimeout: awscdk.Duration_Seconds(jsii.Number(180)),
		DeadLetterQueue:   &awssqs.DeadLetterQueue{Queue: deliveryDLQ, MaxReceiveCount: jsii.Number(5)},
	})
	overrideID(deliveryQueue, "DeliveryQueue")

	// Functions.
	fns := map[kind][]awslambda.Function{}
	byID := map[string]awslambda.Function{}
	for _, f := range functions {
		env := map[string]*string{envTable: table.TableName()}
		if f.Kind == apiFunction {
			env[envRateLimit] = rateLimit.ValueAsString()
			env[envApplicationRateLimit] = applicationRateLimit.ValueAsString()
		}
		fn := awslambda.NewFunction(stack, jsii.String(f.ID), &awslambda.FunctionProps{
			Runtime:      awslambda.Runtime_PROVIDED_AL2023(),
			Architecture: awslambda.Architecture_ARM_64(),
			Handler:      jsii.String("bootstrap"),
			Code:         code(f.Dir),
			MemorySize:   jsii.Number(memorySize),
			Timeout:      awscdk.Duration_Seconds(jsii.Number(f.Timeout)),
			Environment:  &env,
			Description:  jsii.String("Tally " + f.Dir + " (functions/" + f.Dir + ")"),
		})
		overrideID(fn, f.ID)
		fns[f.Kind] = append(fns[f.Kind], fn)
		byID[f.ID] = fn
	}
	approver := fns[approverFunction][0]
	fanout := fns[fanoutFunction][0]
	deliver := fns[deliverFunction][0]
	attempt := fns[attemptFunction][0]
	fallback := fns[fallbackFunction][0]
	deliveries := byID["DeliveriesFunction"]
	reports := byID["ReportsFunction"]

	// The retry workflow: Wait states between attempts 2..7.
	retry := awsstepfunctions.NewStateMachine(stack, jsii.String("RetryStateMachine"), &awsstepfunctions.StateMachineProps{
		StateMachineType: awsstepfunctions.StateMachineType_STANDARD,
		DefinitionBody:   awsstepfunctions.DefinitionBody_FromFile(jsii.String(definition), nil),
		DefinitionSubstitutions: &map[string]*string{
			"AttemptFunctionArn": attempt.FunctionArn(),
		},
	})
	overrideID(retry, "RetryStateMachine")

	// Environment that points at other resources.
	fanout.AddEnvironment(jsii.String(envDeliveryQueueURL), deliveryQueue.QueueUrl(), nil)
	deliveries.AddEnvironment(jsii.String(envDeliveryQueueURL), deliveryQueue.QueueUrl(), nil)
	deliver.AddEnvironment(jsii.String(envRetryStateMachineARN), retry.StateMachineArn(), nil)

	// HTTP API (payload format 2.0), one integration per function. The
	// fallback's is the default integration: the $default route, which gets
	// every request no other route matches.
	lambdaIntegration := func(fn awslambda.Function, id string) awsapigatewayv2.HttpRouteIntegration {
		return awsapigatewayv2integrations.NewHttpLambdaIntegration(jsii.String(id+"Integration"), fn,
			&awsapigatewayv2integrations.HttpLambdaIntegrationProps{
				PayloadFormatVersion: awsapigatewayv2.PayloadFormatVersion_VERSION_2_0(),
			})
	}
	api := awsapigatewayv2.NewHttpApi(stack, jsii.String("HttpApi"), &awsapigatewayv2.HttpApiProps{
		Description:        jsii.String("Tally API"),
		DefaultIntegration: lambdaIntegration(fallback, *fallback.Node().Id()),
	})
	overrideID(api, "HttpApi")
	for _, f := range functions {
		if f.Kind != apiFunction {
			continue
		}
		integration := lambdaIntegration(byID[f.ID], f.ID)
		for _, r := range f.Routes {
			method, path, err := splitRoute(r)
			if err != nil {
				return nil, err
			}
			api.AddRoutes(&awsapigatewayv2.AddRoutesOptions{
				Path:        jsii.String(path),
				Methods:     &[]awsapigatewayv2.HttpMethod{method},
				Integration: integration,
			})
		}
	}

	// Event sources.
	fanout.AddEventSource(awslambdaeventsources.NewDynamoEventSource(table, &awslambdaeventsources.DynamoEventSourceProps{
		StartingPosition:        awslambda.StartingPosition_LATEST,
		BatchSize:               jsii.Number(100),
		BisectBatchOnError:      jsii.Bool(true),
		RetryAttempts:           jsii.Number(10),
		ReportBatchItemFailures: jsii.Bool(true),
		OnFailure:               awslambdaeventsources.NewSqsDlq(fanoutDLQ),
		Filters: &[]*map[string]interface{}{
			awslambda.FilterCriteria_Filter(&map[string]interface{}{
				"eventName": awslambda.FilterRule_IsEqual(jsii.String("INSERT")),
				"dynamodb": map[string]interface{}{
					"Keys": map[string]interface{}{
						"pk": map[string]interface{}{"S": awslambda.FilterRule_BeginsWith(jsii.String("EVT#"))},
					},
				},
			}),
		},
	}))
	deliver.AddEventSource(awslambdaeventsources.NewSqsEventSource(deliveryQueue, &awslambdaeventsources.SqsEventSourceProps{
		BatchSize:               jsii.Number(10),
		ReportBatchItemFailures: jsii.Bool(true),
	}))
	schedule := awsevents.NewRule(stack, jsii.String("ApproverSchedule"), &awsevents.RuleProps{
		Description: jsii.String("Approves pending conversions whose hold time has elapsed."),
		Schedule:    awsevents.Schedule_Expression(jsii.String(approverSchedule)),
		Targets:     &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(approver, nil)},
	})
	overrideID(schedule, "ApproverSchedule")

	// Least privilege. The fallback gets nothing: it never reads the table.
	for _, f := range functions {
		if fn := byID[f.ID]; fn != reports && fn != fallback {
			table.GrantReadWriteData(fn)
		}
	}
	// Reports reads, and updates only the rate-limit counters.
	table.Grant(reports, jsii.String("dynamodb:GetItem"), jsii.String("dynamodb:Query"))
	reports.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("dynamodb:UpdateItem"),
		Resources: &[]*string{table.TableArn()},
		Conditions: &map[string]interface{}{
			"ForAllValues:StringLike": map[string]interface{}{
				"dynamodb:LeadingKeys": []string{rateCounterKeys},
			},
		},
	}))
	deliveryQueue.GrantSendMessages(fanout)
	deliveryQueue.GrantSendMessages(deliveries)
	retry.GrantStartExecution(deliver)
	attempt.GrantInvoke(retry)

	// Alarms: anything in a dead-letter queue, any failed retry workflow.
	alarm(stack, "DeliveryDLQAlarm", "Deliveries the delivery function failed 5 times are in DeliveryDLQ.",
		deliveryDLQ.MetricApproximateNumberOfMessagesVisible(nil))
	alarm(stack, "FanoutDLQAlarm", "Stream batches the fan-out failed are in FanoutDLQ.",
		fanoutDLQ.MetricApproximateNumberOfMessagesVisible(nil))
	alarm(stack, "RetryFailedExecutionsAlarm", "A retry workflow execution failed.",
		retry.MetricFailed(nil))
	alarm(stack, "RetryTimedOutExecutionsAlarm", "A retry workflow execution timed out.",
		retry.MetricTimedOut(nil))

	// Outputs.
	output(stack, "BaseUrl", "Management API base URL.", jsii.String(*api.ApiEndpoint()+"/api/v1"))
	output(stack, "PublicBaseUrl", "Public API base URL.", api.ApiEndpoint())
	output(stack, "TableName", "The DynamoDB table.", table.TableName())
	output(stack, "DeliveryQueueUrl", "The delivery queue.", deliveryQueue.QueueUrl())
	output(stack, "RetryStateMachineArn", "The retry state machine.", retry.StateMachineArn())
	return stack, nil
}

// functionCode returns the code of the function in functions/<dir>.
func functionCode(props *TallyStackProps) (func(dir string) awslambda.Code, error) {
	if props.PlaceholderCode != "" {
		c := awslambda.Code_FromAsset(jsii.String(props.PlaceholderCode), nil)
		return func(string) awslambda.Code { return c }, nil
	}
	bin := props.BinDir
	if bin == "" {
		bin = filepath.Join(props.RepoRoot, "bin")
	}
	var missing []error
	for _, f := range functions {
		if _, err := os.Stat(filepath.Join(bin, f.Dir, "bootstrap")); err != nil {
			missing = append(missing, err)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("function code missing: run `make build` first, or synthesize with placeholder code (-c placeholderCode=true): %w", errors.Join(missing...))
	}
	return func(dir string) awslambda.Code {
		return awslambda.Code_FromAsset(jsii.String(filepath.Join(bin, dir)), nil)
	}, nil
}

// WritePlaceholderCode writes a bootstrap into dir that only says it is a
// placeholder, for TallyStackProps.PlaceholderCode.
func WritePlaceholderCode(dir string) error {
	const script = "#!/bin/sh\necho 'placeholder code: deploy the output of make build' >&2\nexit 1\n"
	return os.WriteFile(filepath.Join(dir, "bootstrap"), []byte(script), 0o755)
}

// splitRoute splits "METHOD /path".
func splitRoute(route string) (awsapigatewayv2.HttpMethod, string, error) {
	var method, path string
	if _, err := fmt.Sscanf(route, "%s %s", &method, &path); err != nil {
		return "", "", fmt.Errorf("route %q: %w", route, err)
	}
	return awsapigatewayv2.HttpMethod(method), path, nil
}

// overrideID gives c's CloudFormation resource the logical id the contract
// names, instead of CDK's path hash.
func overrideID(c constructs.IConstruct, id string) {
	c.Node().DefaultChild().(awscdk.CfnResource).OverrideLogicalId(jsii.String(id))
}

func alarm(stack awscdk.Stack, id, description string, metric awscloudwatch.Metric) {
	a := awscloudwatch.NewAlarm(stack, jsii.String(id), &awscloudwatch.AlarmProps{
		AlarmDescription:   jsii.String(description),
		Metric:             metric,
		Threshold:          jsii.Number(0),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})
	overrideID(a, id)
}

func output(stack awscdk.Stack, id, description string, value *string) {
	awscdk.NewCfnOutput(stack, jsii.String(id), &awscdk.CfnOutputProps{
		Description: jsii.String(description),
		Value:       value,
	})
}

func orDefault(v, def float64) *float64 {
	if v == 0 {
		v = def
	}
	return jsii.Number(v)
}
