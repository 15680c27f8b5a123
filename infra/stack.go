package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2integrations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
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

	// RateLimit, ApplicationRateLimit and DeliverMaxConcurrency are the
	// defaults of the template parameters of the same names (0: 100, 10
	// and 50).
	RateLimit             float64
	ApplicationRateLimit  float64
	DeliverMaxConcurrency float64
}

// Default parameter values (docs/aws.md).
const (
	defaultRateLimit            = 100
	defaultApplicationRateLimit = 10
	defaultClickRateLimit       = 60
	defaultRetentionDays        = 30   // deliveries and logs
	defaultThrottlingRate       = 1000 // each HTTP API route, requests a second
	defaultThrottlingBurst      = 2000
	defaultConversionsRate      = 500 // the conversion routes: what a new table carries
	defaultConversionsBurst     = 1000
	defaultClickRate            = 500 // the click route
	defaultClickBurst           = 1000
	defaultDeliverConcurrency   = 50 // batches of 10 at once
)

// logRetentionDays are the retentions CloudWatch Logs allows.
var logRetentionDays = jsii.Strings("1", "3", "5", "7", "14", "30", "60", "90", "120", "150", "180", "365", "400", "545", "731",
	"1096", "1827", "2192", "2557", "2922", "3288", "3653")

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
	clickRateLimit := awscdk.NewCfnParameter(stack, jsii.String("ClickRateLimit"), &awscdk.CfnParameterProps{
		Type:        jsii.String("Number"),
		Default:     defaultClickRateLimit,
		MinValue:    jsii.Number(1),
		Description: jsii.String("Clicks of one offer's tracking link recorded per minute per client IP; past it the visitor is redirected untracked (" + envClickRateLimit + ")."),
	})

	number := func(id, description string, def float64) awscdk.CfnParameter {
		return awscdk.NewCfnParameter(stack, jsii.String(id), &awscdk.CfnParameterProps{
			Type: jsii.String("Number"), Default: def, MinValue: jsii.Number(1), Description: jsii.String(description),
		})
	}
	deliveryRetention := number("DeliveryRetentionDays", "Days a webhook delivery and its attempts stay in the delivery log after their last change ("+
		envDeliveryRetention+"); then the table's TTL removes them.", defaultRetentionDays)
	logRetention := awscdk.NewCfnParameter(stack, jsii.String("LogRetentionDays"), &awscdk.CfnParameterProps{
		Type: jsii.String("Number"), Default: "30", AllowedValues: logRetentionDays, // (a value of the list, as written)
		Description: jsii.String("Days the functions' CloudWatch log groups keep their logs."),
	})
	alarmEmail := awscdk.NewCfnParameter(stack, jsii.String("AlarmEmail"), &awscdk.CfnParameterProps{
		Type: jsii.String("String"), Default: "",
		Description: jsii.String("An e-mail address the alarms notify (through the AlarmTopic SNS topic; the address must confirm the subscription). Empty: subscribe to AlarmTopic some other way."),
	})
	throttlingRate := number("ApiThrottlingRateLimit", "Requests per second each route without settings of its own accepts before answering 429 "+
		"(the stage's DefaultRouteSettings, a limit per route, not for the API in all).", defaultThrottlingRate)
	throttlingBurst := number("ApiThrottlingBurstLimit", "Requests each route without settings of its own accepts in a burst above its rate.", defaultThrottlingBurst)
	conversionsRate := number("ConversionsThrottlingRateLimit", "Requests per second each conversion route (POST /api/v1/conversions, GET /postback) accepts before answering 429. "+
		`500 is what a new table carries (docs/aws.md, "Capacity"); 10k conversions a second need 12000 with the rest of that section's parameter set.`, defaultConversionsRate)
	conversionsBurst := number("ConversionsThrottlingBurstLimit", "Requests each conversion route accepts in a burst above its rate (the account's burst, 5000 by default, caps it).", defaultConversionsBurst)
	clickRate := number("ClickThrottlingRateLimit", "Requests per second the click route (GET /c/{offerId}, no key) accepts before answering 429. "+
		`A click writes about 10 WRU; 500 keeps an abused link within what a new table carries (docs/aws.md, "Capacity").`, defaultClickRate)
	clickBurst := number("ClickThrottlingBurstLimit", "Requests the click route accepts in a burst above its rate.", defaultClickBurst)
	deliverConcurrency := awscdk.NewCfnParameter(stack, jsii.String("DeliverMaxConcurrency"), &awscdk.CfnParameterProps{
		Type: jsii.String("Number"), Default: orDefault(props.DeliverMaxConcurrency, defaultDeliverConcurrency),
		MinValue: jsii.Number(2), MaxValue: jsii.Number(1000), // what an SQS event source allows
		Description: jsii.String("Batches of 10 deliveries DeliverFunction works on at once at most (its SQS event source's MaximumConcurrency, 2 to 1000); " +
			"50 carries about 2,500 deliveries a second, 10k a second needs 200 (docs/aws.md)."),
	})
	deletionProtection := awscdk.NewCfnParameter(stack, jsii.String("TableDeletionProtection"), &awscdk.CfnParameterProps{
		Type: jsii.String("String"), Default: "true", AllowedValues: jsii.Strings("true", "false"),
		Description: jsii.String(`Whether DynamoDB refuses to delete the table (DeletionProtectionEnabled); "false" for dev stacks meant to be torn down with their data.`),
	})
	// Warm throughput (docs/aws.md, "Capacity"): 0 leaves it to DynamoDB;
	// it is set when its writes are, its reads only with them.
	warm := func(id, condition, description string) (awscdk.CfnParameter, awscdk.CfnCondition) {
		p := awscdk.NewCfnParameter(stack, jsii.String(id), &awscdk.CfnParameterProps{
			Type: jsii.String("Number"), Default: 0, MinValue: jsii.Number(0), Description: jsii.String(description),
		})
		return p, awscdk.NewCfnCondition(stack, jsii.String(condition), &awscdk.CfnConditionProps{
			Expression: awscdk.Fn_ConditionNot(awscdk.Fn_ConditionEquals(p.ValueAsNumber(), jsii.Number(0))),
		})
	}
	tableWarmWrites, hasTableWarm := warm("TableWarmWriteUnitsPerSecond", "HasTableWarmThroughput", "Write units a second the table serves at once (its WarmThroughput; a new on-demand table serves 4000). "+
		`0 leaves it to DynamoDB. Else at least 4000; 80000 for 10k conversions a second (docs/aws.md, "Capacity"), which also needs the table quota raised.`)
	tableWarmReads, hasTableWarmReads := warm("TableWarmReadUnitsPerSecond", "HasTableWarmReads", "Read units a second the table serves at once (a new on-demand table serves 12000), "+
		"set only with TableWarmWriteUnitsPerSecond. 0 leaves it to DynamoDB; else at least 12000; 80000 for 10k conversions a second.")
	indexWarmWrites, hasIndexWarm := warm("IndexWarmWriteUnitsPerSecond", "HasIndexWarmThroughput", "Write units a second each global secondary index serves at once (its WarmThroughput; 4000 when new). "+
		`0 leaves it to DynamoDB; else at least 4000; 25000 for 10k conversions a second (docs/aws.md, "Capacity").`)
	indexWarmReads, hasIndexWarmReads := warm("IndexWarmReadUnitsPerSecond", "HasIndexWarmReads", "Read units a second each global secondary index serves at once (12000 when new), "+
		"set only with IndexWarmWriteUnitsPerSecond. 0 leaves it to DynamoDB; else at least 12000.")
	warmThroughput := func(has, hasReads awscdk.CfnCondition, writes, reads awscdk.CfnParameter) awscdk.IResolvable {
		return awscdk.Fn_ConditionIf(has.LogicalId(), map[string]any{
			"WriteUnitsPerSecond": writes.ValueAsNumber(),
			"ReadUnitsPerSecond":  awscdk.Fn_ConditionIf(hasReads.LogicalId(), reads.ValueAsNumber(), awscdk.Aws_NO_VALUE()),
		}, awscdk.Aws_NO_VALUE())
	}
	hasAlarmEmail := awscdk.NewCfnCondition(stack, jsii.String("HasAlarmEmail"), &awscdk.CfnConditionProps{
		Expression: awscdk.Fn_ConditionNot(awscdk.Fn_ConditionEquals(alarmEmail.ValueAsString(), jsii.String(""))),
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
		gsi := &awsdynamodb.GlobalSecondaryIndexProps{
			IndexName:      jsii.String("gsi" + n),
			PartitionKey:   &awsdynamodb.Attribute{Name: jsii.String("gsi" + n + "pk"), Type: awsdynamodb.AttributeType_STRING},
			SortKey:        &awsdynamodb.Attribute{Name: jsii.String("gsi" + n + "sk"), Type: awsdynamodb.AttributeType_STRING},
			ProjectionType: awsdynamodb.ProjectionType_ALL,
		}
		if n != "3" {
			// Data and what the lists take from the index (store.IndexAttrs),
			// not a delivery's response bodies.
			gsi.ProjectionType = awsdynamodb.ProjectionType_INCLUDE
			gsi.NonKeyAttributes = jsii.Strings("data", "conversionId", "lastUsedMs")
		}
		table.AddGlobalSecondaryIndex(gsi)
	}
	overrideID(table, "Table")
	// Parameters, which the construct's DeletionProtection (a bool) and
	// WarmThroughput (numbers) cannot take.
	cfnTable := table.Node().DefaultChild().(awscdk.CfnResource)
	cfnTable.AddPropertyOverride(jsii.String("DeletionProtectionEnabled"), deletionProtection.ValueAsString())
	cfnTable.AddPropertyOverride(jsii.String("WarmThroughput"), warmThroughput(hasTableWarm, hasTableWarmReads, tableWarmWrites, tableWarmReads))
	for i := range 3 {
		cfnTable.AddPropertyOverride(jsii.String(fmt.Sprintf("GlobalSecondaryIndexes.%d.WarmThroughput", i)),
			warmThroughput(hasIndexWarm, hasIndexWarmReads, indexWarmWrites, indexWarmReads))
	}

	// Queues.
	fourteenDays := awscdk.Duration_Days(jsii.Number(14))
	// Every queue is encrypted at rest (SQS-managed keys): messages carry
	// receivers' URLs.
	sse := awssqs.QueueEncryption_SQS_MANAGED
	deliveryDLQ := awssqs.NewQueue(stack, jsii.String("DeliveryDLQ"), &awssqs.QueueProps{RetentionPeriod: fourteenDays, Encryption: sse})
	overrideID(deliveryDLQ, "DeliveryDLQ")
	fanoutDLQ := awssqs.NewQueue(stack, jsii.String("FanoutDLQ"), &awssqs.QueueProps{RetentionPeriod: fourteenDays, Encryption: sse})
	overrideID(fanoutDLQ, "FanoutDLQ")
	rollupDLQ := awssqs.NewQueue(stack, jsii.String("RollupDLQ"), &awssqs.QueueProps{RetentionPeriod: fourteenDays, Encryption: sse})
	overrideID(rollupDLQ, "RollupDLQ")
	deliveryQueue := awssqs.NewQueue(stack, jsii.String("DeliveryQueue"), &awssqs.QueueProps{
		VisibilityTimeout: awscdk.Duration_Seconds(jsii.Number(180)),
		RetentionPeriod:   awscdk.Duration_Days(jsii.Number(4)),
		DeadLetterQueue:   &awssqs.DeadLetterQueue{Queue: deliveryDLQ, MaxReceiveCount: jsii.Number(5)},
		Encryption:        sse,
	})
	overrideID(deliveryQueue, "DeliveryQueue")

	// Functions.
	fns := map[kind][]awslambda.Function{}
	byID := map[string]awslambda.Function{}
	roles := map[string]awsiam.Role{}
	for _, f := range functions {
		env := map[string]*string{envTable: table.TableName(), envDeliveryRetention: deliveryRetention.ValueAsString()}
		if f.Kind == apiFunction || f.Kind == fallbackFunction {
			env[envRateLimit] = rateLimit.ValueAsString()
			env[envApplicationRateLimit] = applicationRateLimit.ValueAsString()
		}
		if f.ID == "ClickFunction" || f.Kind == fallbackFunction { // the functions that serve /c/{offerId}
			env[envClickRateLimit] = clickRateLimit.ValueAsString()
		}
		// Each function logs to a log group of its own that keeps logs
		// LogRetentionDays (an L2 log group takes no parameter for it).
		logs := awslogs.NewLogGroup(stack, jsii.String(f.ID+"LogGroup"), &awslogs.LogGroupProps{RemovalPolicy: awscdk.RemovalPolicy_DESTROY})
		logs.Node().DefaultChild().(awscdk.CfnResource).AddPropertyOverride(jsii.String("RetentionInDays"), logRetention.ValueAsNumber())
		overrideID(logs, f.ID+"LogGroup")
		var reserved *float64
		switch f.Kind {
		case approverFunction:
			reserved = jsii.Number(approverRuns) // runs overlap while a backlog lasts
		case reconcilerFunction:
			reserved = jsii.Number(1) // runs must not overlap
		}
		// A role of its own with the permissions of its kind (docs/aws.md,
		// "Least privilege"); CDK adds no managed policy to a given role.
		role := newRole(stack, f.ID+"Role", "lambda.amazonaws.com")
		roles[f.ID] = role
		allow(role, logs.LogGroupArn(), nil, "logs:CreateLogStream", "logs:PutLogEvents")
		switch {
		case f.ReadOnly || f.Kind == fallbackFunction: // they only read, and count requests
			allow(role, table.TableArn(), nil, readOnlyActions...)
		default:
			allow(role, table.TableArn(), nil, tableActions[f.Kind]...)
		}
		for _, action := range []string{put, update, del} { // each only in its partitions
			if keys := writeKeys[f.ID][action]; keys != nil {
				allow(role, table.TableArn(), &map[string]any{"ForAllValues:StringLike": map[string]any{"dynamodb:LeadingKeys": keys}}, action)
			}
		}
		if slices.Contains(queriesIndexes, f.Kind) || f.Kind == fallbackFunction {
			allow(role, jsii.String(*table.TableArn()+"/index/*"), nil, "dynamodb:Query")
		}
		fn := awslambda.NewFunction(stack, jsii.String(f.ID), &awslambda.FunctionProps{
			Runtime:      awslambda.Runtime_PROVIDED_AL2023(),
			Architecture: awslambda.Architecture_ARM_64(),
			Handler:      jsii.String("bootstrap"),
			Code:         code(f.Dir),
			MemorySize:   jsii.Number(f.memory()),
			Timeout:      awscdk.Duration_Seconds(jsii.Number(f.Timeout)),
			Environment:  &env,
			Description:  jsii.String("Tally " + f.Dir + " (functions/" + f.Dir + ")"),
			LogGroup:     logs,
			// JSON, so that Lambda's own START, END and REPORT lines (INFO) can
			// be left out: a quarter of a request's log bytes
			// (docs/aws.md, "What a conversion costs").
			LoggingFormat:                awslambda.LoggingFormat_JSON,
			SystemLogLevelV2:             awslambda.SystemLogLevel_WARN,
			ReservedConcurrentExecutions: reserved,
			Role:                         role,
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
	reconciler := fns[reconcilerFunction][0]
	rollup := fns[rollupFunction][0]

	// The retry workflow: Wait states between attempts 2..7.
	retryRole := newRole(stack, "RetryStateMachineRole", "states.amazonaws.com")
	allow(retryRole, attempt.FunctionArn(), nil, "lambda:InvokeFunction")
	retry := awsstepfunctions.NewStateMachine(stack, jsii.String("RetryStateMachine"), &awsstepfunctions.StateMachineProps{
		Role:             retryRole,
		StateMachineType: awsstepfunctions.StateMachineType_STANDARD,
		DefinitionBody:   awsstepfunctions.DefinitionBody_FromFile(jsii.String(definition), nil),
		DefinitionSubstitutions: &map[string]*string{
			"AttemptFunctionArn": attempt.FunctionArn(),
		},
	})
	overrideID(retry, "RetryStateMachine")

	// Environment that points at other resources.
	for _, id := range sendsDeliveries {
		byID[id].AddEnvironment(jsii.String(envDeliveryQueueURL), deliveryQueue.QueueUrl(), nil)
	}
	deliver.AddEnvironment(jsii.String(envRetryStateMachineARN), retry.StateMachineArn(), nil)
	// The key that wraps the data key sealing webhook signing secrets in the
	// table: retained with it, as the secrets it keeps open with it only.
	secretsKey := awskms.NewKey(stack, jsii.String("SecretsKey"), &awskms.KeyProps{
		Description:       jsii.String("Tally webhook signing secrets (the data key sealing them)"),
		EnableKeyRotation: jsii.Bool(true),
		RemovalPolicy:     awscdk.RemovalPolicy_RETAIN,
	})
	overrideID(secretsKey, "SecretsKey")
	for id, actions := range usesSecrets {
		byID[id].AddEnvironment(jsii.String(envSecretsKeyARN), secretsKey.KeyArn(), nil)
		allow(roles[id], secretsKey.KeyArn(), nil, actions...)
	}
	byID["ReconcilerFunction"].AddEnvironment(jsii.String(envDeliverConcurrency), deliverConcurrency.ValueAsString(), nil)
	byID["ReconcilerFunction"].AddEnvironment(jsii.String(envFanoutDLQURL), fanoutDLQ.QueueUrl(), nil)

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
	stage := api.DefaultStage().Node().DefaultChild().(awscdk.CfnResource)
	stage.AddPropertyOverride(jsii.String("DefaultRouteSettings"), map[string]any{
		"ThrottlingRateLimit": throttlingRate.ValueAsNumber(), "ThrottlingBurstLimit": throttlingBurst.ValueAsNumber(),
	})
	// The routes that carry the load have throttles of their own (the
	// default is per route too). A stage's route settings name routes that
	// must exist first, hence the dependencies below.
	routeThrottles := map[string]map[string]any{
		"POST /api/v1/conversions": {"ThrottlingRateLimit": conversionsRate.ValueAsNumber(), "ThrottlingBurstLimit": conversionsBurst.ValueAsNumber()},
		"GET /postback":            {"ThrottlingRateLimit": conversionsRate.ValueAsNumber(), "ThrottlingBurstLimit": conversionsBurst.ValueAsNumber()},
		"GET /c/{offerId}":         {"ThrottlingRateLimit": clickRate.ValueAsNumber(), "ThrottlingBurstLimit": clickBurst.ValueAsNumber()},
	}
	stage.AddPropertyOverride(jsii.String("RouteSettings"), routeThrottles)
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
			routes := api.AddRoutes(&awsapigatewayv2.AddRoutesOptions{
				Path:        jsii.String(path),
				Methods:     &[]awsapigatewayv2.HttpMethod{method},
				Integration: integration,
			})
			if _, ok := routeThrottles[r]; ok {
				for _, route := range *routes {
					stage.Node().AddDependency(route)
				}
			}
		}
	}

	// Event sources, as plain mappings: CDK's event source classes grant
	// the function their own wider permissions (ListStreams on "*"), and
	// the roles already have what the mappings need.
	streamMapping := awslambda.NewCfnEventSourceMapping(stack, jsii.String("FanoutStreamMapping"), &awslambda.CfnEventSourceMappingProps{
		FunctionName:               fanout.FunctionName(),
		EventSourceArn:             table.TableStreamArn(),
		StartingPosition:           jsii.String("LATEST"),
		BatchSize:                  jsii.Number(100),
		BisectBatchOnFunctionError: jsii.Bool(true),
		MaximumRetryAttempts:       jsii.Number(10),
		MaximumRecordAgeInSeconds:  jsii.Number(maxRecordAge),
		FunctionResponseTypes:      jsii.Strings("ReportBatchItemFailures"),
		DestinationConfig: &awslambda.CfnEventSourceMapping_DestinationConfigProperty{
			OnFailure: &awslambda.CfnEventSourceMapping_OnFailureProperty{Destination: fanoutDLQ.QueueArn()},
		},
		FilterCriteria: &awslambda.CfnEventSourceMapping_FilterCriteriaProperty{
			Filters: &[]any{
				&awslambda.CfnEventSourceMapping_FilterProperty{Pattern: jsii.String(fanoutFilters[0])},
				&awslambda.CfnEventSourceMapping_FilterProperty{Pattern: jsii.String(fanoutFilters[1])},
			},
		},
	})
	// The rollup function reads from the stream's start (its shard
	// checkpoints skip what it added before); a record it cannot read fails
	// alone, and what it gives up goes to RollupDLQ rather than hold the
	// shard. The tumbling window gives each batch its shard id.
	rollupMapping := awslambda.NewCfnEventSourceMapping(stack, jsii.String("RollupStreamMapping"), &awslambda.CfnEventSourceMappingProps{
		FunctionName:                   rollup.FunctionName(),
		EventSourceArn:                 table.TableStreamArn(),
		StartingPosition:               jsii.String("TRIM_HORIZON"),
		BatchSize:                      jsii.Number(1000),
		MaximumBatchingWindowInSeconds: jsii.Number(15),
		BisectBatchOnFunctionError:     jsii.Bool(true),
		MaximumRetryAttempts:           jsii.Number(10),
		MaximumRecordAgeInSeconds:      jsii.Number(maxRecordAge),
		FunctionResponseTypes:          jsii.Strings("ReportBatchItemFailures"),
		DestinationConfig: &awslambda.CfnEventSourceMapping_DestinationConfigProperty{
			OnFailure: &awslambda.CfnEventSourceMapping_OnFailureProperty{Destination: rollupDLQ.QueueArn()},
		},
		TumblingWindowInSeconds: jsii.Number(60),
		FilterCriteria: &awslambda.CfnEventSourceMapping_FilterCriteriaProperty{
			Filters: &[]any{&awslambda.CfnEventSourceMapping_FilterProperty{Pattern: jsii.String(rollupFilter)}},
		},
	})
	queueMapping := awslambda.NewCfnEventSourceMapping(stack, jsii.String("DeliverQueueMapping"), &awslambda.CfnEventSourceMappingProps{
		FunctionName:          deliver.FunctionName(),
		EventSourceArn:        deliveryQueue.QueueArn(),
		BatchSize:             jsii.Number(10),
		FunctionResponseTypes: jsii.Strings("ReportBatchItemFailures"),
		ScalingConfig:         &awslambda.CfnEventSourceMapping_ScalingConfigProperty{MaximumConcurrency: deliverConcurrency.ValueAsNumber()},
	})
	// A mapping is validated against its function's role when created.
	streamMapping.Node().AddDependency(roles["FanoutFunction"])
	rollupMapping.Node().AddDependency(roles["RollupFunction"])
	queueMapping.Node().AddDependency(roles["DeliverFunction"])
	allow(roles["FanoutFunction"], jsii.String(*table.TableArn()+"/stream/*"), nil,
		"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:ListStreams")
	allow(roles["FanoutFunction"], fanoutDLQ.QueueArn(), nil, "sqs:SendMessage") // its on-failure destination
	allow(roles["RollupFunction"], jsii.String(*table.TableArn()+"/stream/*"), nil,
		"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:ListStreams")
	allow(roles["RollupFunction"], rollupDLQ.QueueArn(), nil, "sqs:SendMessage") // its on-failure destination
	allow(roles["DeliverFunction"], deliveryQueue.QueueArn(), nil, "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes")
	schedule := awsevents.NewRule(stack, jsii.String("ApproverSchedule"), &awsevents.RuleProps{
		Description: jsii.String("Approves pending conversions whose hold time has elapsed."),
		Schedule:    awsevents.Schedule_Expression(jsii.String(approverSchedule)),
		Targets:     &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(approver, nil)},
	})
	overrideID(schedule, "ApproverSchedule")
	reconcile := awsevents.NewRule(stack, jsii.String("ReconcilerSchedule"), &awsevents.RuleProps{
		Description: jsii.String("Re-drives events not fanned out, the conversions of failed stream batches and deliveries overdue by more than 10 minutes."),
		Schedule:    awsevents.Schedule_Expression(jsii.String(reconcilerSchedule)),
		Targets:     &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(reconciler, nil)},
	})
	overrideID(reconcile, "ReconcilerSchedule")

	// The rest of least privilege: what the environment points at.
	for _, id := range sendsDeliveries {
		allow(roles[id], deliveryQueue.QueueArn(), nil, "sqs:SendMessage")
	}
	allow(roles["ReconcilerFunction"], deliveryQueue.QueueArn(), nil, "sqs:GetQueueAttributes")                                 // the backlog
	allow(roles["ReconcilerFunction"], fanoutDLQ.QueueArn(), nil, "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:SendMessage") // failed stream batches, one left unfinished sent back
	allow(roles["DeliverFunction"], retry.StateMachineArn(), nil, "states:StartExecution")
	allow(roles["DeliverFunction"], jsii.String(fmt.Sprintf("arn:%s:states:%s:%s:execution:%s:*",
		*stack.Partition(), *stack.Region(), *stack.Account(), *retry.StateMachineName())), nil, "states:DescribeExecution")

	// Alarms, each notifying AlarmTopic (and AlarmEmail, when given).
	// Encrypted with a key of the stack: CloudWatch may publish to an
	// encrypted topic only if the key's policy lets it, which the AWS managed
	// alias/aws/sns does not.
	topicKey := awskms.NewKey(stack, jsii.String("AlarmTopicKey"), &awskms.KeyProps{
		Description:       jsii.String("Tally alarm topic (AlarmTopic) at rest"),
		EnableKeyRotation: jsii.Bool(true),
		RemovalPolicy:     awscdk.RemovalPolicy_DESTROY,
	})
	overrideID(topicKey, "AlarmTopicKey")
	topicKey.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String("CloudWatchAlarms"),
		Principals: &[]awsiam.IPrincipal{awsiam.NewServicePrincipal(jsii.String("cloudwatch.amazonaws.com"), nil)},
		Actions:    jsii.Strings("kms:Decrypt", "kms:GenerateDataKey*"),
		Resources:  jsii.Strings("*"),
	}), nil)
	topic := awssns.NewTopic(stack, jsii.String("AlarmTopic"), &awssns.TopicProps{DisplayName: jsii.String("Tally alarms"), MasterKey: topicKey})
	overrideID(topic, "AlarmTopic")
	subscription := awssns.NewCfnSubscription(stack, jsii.String("AlarmEmailSubscription"), &awssns.CfnSubscriptionProps{
		TopicArn: topic.TopicArn(), Protocol: jsii.String("email"), Endpoint: alarmEmail.ValueAsString(),
	})
	subscription.CfnOptions().SetCondition(hasAlarmEmail)
	subscription.OverrideLogicalId(jsii.String("AlarmEmailSubscription"))
	fiveMinutes := &awscloudwatch.MetricOptions{Period: awscdk.Duration_Minutes(jsii.Number(5))}
	maximum := &awscloudwatch.MetricOptions{Period: awscdk.Duration_Minutes(jsii.Number(5)), Statistic: jsii.String("Maximum")}
	// The reconciler's own metric (EMF, internal/emf): a deferral is work left
	// behind while deliver is behind.
	deferrals := awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace: jsii.String("Tally"), MetricName: jsii.String("ReconcilerDeferrals"),
		DimensionsMap: &map[string]*string{"FunctionName": reconciler.FunctionName()},
		Period:        awscdk.Duration_Minutes(jsii.Number(5)), Statistic: jsii.String("Sum"),
	})
	type alarmSpec struct {
		id, description string
		metric          awscloudwatch.Metric
		threshold       float64
	}
	alarms := []alarmSpec{
		{"LambdaThrottlesAlarm", lambdaThrottlesAlarm, awslambda.Function_MetricAllThrottles(fiveMinutes), 0},
		{"ApiServerErrorsAlarm", "The HTTP API answered 5xx (a function failed, timed out or was throttled, or answered 500 itself).", api.MetricServerError(fiveMinutes), 0},
		{"DeliveryDLQAlarm", "Deliveries the delivery function failed 5 times are in DeliveryDLQ.", deliveryDLQ.MetricApproximateNumberOfMessagesVisible(nil), 0},
		{"FanoutDLQAlarm", "Stream batches the fan-out failed are in FanoutDLQ.", fanoutDLQ.MetricApproximateNumberOfMessagesVisible(nil), 0},
		{"RollupDLQAlarm", "Stream records the rollups gave up on are in RollupDLQ (they are missing from the reports).", rollupDLQ.MetricApproximateNumberOfMessagesVisible(nil), 0},
		{"RetryFailedExecutionsAlarm", "A retry workflow execution failed.", retry.MetricFailed(nil), 0},
		{"RetryTimedOutExecutionsAlarm", "A retry workflow execution timed out.", retry.MetricTimedOut(nil), 0},
		{"RetryThrottledExecutionsAlarm", "Step Functions throttled state transitions or retries of retry workflow executions (their attempts run late).", retry.MetricThrottled(nil), 0},
		{"RetryAbortedExecutionsAlarm", "A retry workflow execution was stopped (StopExecution); the reconciler restarts its delivery once it is overdue.", retry.MetricAborted(nil), 0},
		{"FanoutIteratorAgeAlarm", "The fan-out is more than 5 minutes behind the table's stream.", fanout.Metric(jsii.String("IteratorAge"), maximum), 300000},
		{"RollupIteratorAgeAlarm", "The reports' rollups are more than 5 minutes behind the table's stream.", rollup.Metric(jsii.String("IteratorAge"), maximum), 300000},
		{"DeliveryQueueAgeAlarm", "A delivery has waited in DeliveryQueue for more than 10 minutes (deliver is behind or failing).",
			deliveryQueue.MetricApproximateAgeOfOldestMessage(maximum), 600},
		{"ReconcilerDeferralsAlarm", "A reconciler run left overdue work for a later run, because the delivery queue's backlog was over a minute of deliver's capacity (deliver is behind), or the run's time was up.", deferrals, 0},
	}
	// Every function's errors, one alarm each, named after it; throttles of
	// a function with reserved concurrency likewise, the others' together.
	for _, f := range functions {
		fn := byID[f.ID]
		alarms = append(alarms, alarmSpec{f.ID + "ErrorsAlarm", fmt.Sprintf(errorsAlarm[f.Kind], f.ID), fn.MetricErrors(fiveMinutes), 0})
		if description, ok := throttlesAlarm[f.Kind]; ok {
			alarms = append(alarms, alarmSpec{f.ID + "ThrottlesAlarm", fmt.Sprintf(description, f.ID), fn.MetricThrottles(fiveMinutes), 0})
		}
	}
	// Each alarm also says when it clears.
	for _, a := range alarms {
		notify(alarm(stack, a.id, a.description, a.metric, a.threshold), topic)
	}
	// The table's and every index's read and write throttle events, added
	// (a write an index cannot take is refused on the table too, and is
	// counted on the index). Written as the template has it: CDK's math
	// expression would name and order its metrics its own way.
	throttles := []any{&awscloudwatch.CfnAlarm_MetricDataQueryProperty{
		Id: jsii.String("throttles"), Label: jsii.String("Read and write throttle events of Table and its indexes"), ReturnData: jsii.Bool(true),
		Expression: jsii.String("SUM([tableReads, tableWrites, gsi1Reads, gsi1Writes, gsi2Reads, gsi2Writes, gsi3Reads, gsi3Writes])"),
	}}
	for _, ix := range []string{"table", "gsi1", "gsi2", "gsi3"} {
		dims := []any{&awscloudwatch.CfnAlarm_DimensionProperty{Name: jsii.String("TableName"), Value: table.TableName()}}
		if ix != "table" {
			dims = append(dims, &awscloudwatch.CfnAlarm_DimensionProperty{Name: jsii.String("GlobalSecondaryIndexName"), Value: jsii.String(ix)})
		}
		for _, m := range []struct{ suffix, name string }{{"Reads", "ReadThrottleEvents"}, {"Writes", "WriteThrottleEvents"}} {
			throttles = append(throttles, &awscloudwatch.CfnAlarm_MetricDataQueryProperty{
				Id: jsii.String(ix + m.suffix), ReturnData: jsii.Bool(false),
				MetricStat: &awscloudwatch.CfnAlarm_MetricStatProperty{
					Metric: &awscloudwatch.CfnAlarm_MetricProperty{Namespace: jsii.String("AWS/DynamoDB"), MetricName: jsii.String(m.name), Dimensions: &dims},
					Period: jsii.Number(300), Stat: jsii.String("Sum"),
				},
			})
		}
	}
	awscloudwatch.NewCfnAlarm(stack, jsii.String("TableThrottlesAlarm"), &awscloudwatch.CfnAlarmProps{
		AlarmDescription:   jsii.String("DynamoDB throttled reads or writes of Table or one of its indexes (gsi1, gsi2, gsi3)."),
		Metrics:            &throttles,
		EvaluationPeriods:  jsii.Number(1),
		Threshold:          jsii.Number(0),
		ComparisonOperator: jsii.String("GreaterThanThreshold"),
		TreatMissingData:   jsii.String("notBreaching"),
		AlarmActions:       jsii.Strings(*topic.TopicArn()),
		OkActions:          jsii.Strings(*topic.TopicArn()),
	}).OverrideLogicalId(jsii.String("TableThrottlesAlarm"))

	// A function (and the state machine) depends on its role through
	// Fn::GetAtt already; CDK also lists the role in DependsOn, which
	// cfn-lint flags (W3005). Keep only the role's policy there: the
	// function must not be created (and its event source mapping checked)
	// before its permissions exist.
	for _, f := range functions {
		dependOnPolicyOnly(stack, byID[f.ID].Node().DefaultChild().(awscdk.CfnResource), roles[f.ID])
	}
	dependOnPolicyOnly(stack, retry.Node().DefaultChild().(awscdk.CfnResource), retryRole)

	// Outputs.
	output(stack, "BaseUrl", "Management API base URL.", jsii.String(*api.ApiEndpoint()+"/api/v1"))
	output(stack, "PublicBaseUrl", "Public API base URL.", api.ApiEndpoint())
	output(stack, "TableName", "The DynamoDB table.", table.TableName())
	output(stack, "DeliveryQueueUrl", "The delivery queue.", deliveryQueue.QueueUrl())
	output(stack, "RetryStateMachineArn", "The retry state machine.", retry.StateMachineArn())
	output(stack, "AlarmTopicArn", "The SNS topic every alarm notifies.", topic.TopicArn())
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
		return nil, fmt.Errorf("function code missing in %s: run `make build` in the repository root first (cd .. && make build), "+
			"or synthesize with placeholder code to read the template: TALLY_CDK_PLACEHOLDER_CODE=1 go run . (cdk synth -c placeholderCode=true): %w",
			bin, errors.Join(missing...))
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

func alarm(stack awscdk.Stack, id, description string, metric awscloudwatch.Metric, threshold float64) awscloudwatch.Alarm {
	a := awscloudwatch.NewAlarm(stack, jsii.String(id), &awscloudwatch.AlarmProps{
		AlarmDescription:   jsii.String(description),
		Metric:             metric,
		Threshold:          jsii.Number(threshold),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})
	overrideID(a, id)
	return a
}

// notify makes an alarm notify topic when it fires and when it clears.
func notify(a awscloudwatch.Alarm, topic awssns.Topic) {
	a.AddAlarmAction(awscloudwatchactions.NewSnsAction(topic))
	a.AddOkAction(awscloudwatchactions.NewSnsAction(topic))
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

// newRole is a role the service may assume, with the logical id id and no
// managed policy.
func newRole(stack awscdk.Stack, id, service string) awsiam.Role {
	role := awsiam.NewRole(stack, jsii.String(id), &awsiam.RoleProps{AssumedBy: awsiam.NewServicePrincipal(jsii.String(service), nil)})
	overrideID(role, id)
	return role
}

// allow lets role do actions on resource, under conditions when given.
func allow(role awsiam.Role, resource *string, conditions *map[string]any, actions ...string) {
	role.AddToPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions: jsii.Strings(actions...), Resources: &[]*string{resource}, Conditions: conditions,
	}))
}

// dependOnPolicyOnly sets res's DependsOn to role's default policy.
func dependOnPolicyOnly(stack awscdk.Stack, res awscdk.CfnResource, role awsiam.Role) {
	policy := role.Node().FindChild(jsii.String("DefaultPolicy")).Node().DefaultChild().(awscdk.CfnElement)
	res.AddOverride(jsii.String("DependsOn"), []*string{stack.GetLogicalId(policy)})
}
