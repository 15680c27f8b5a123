package lambdafn_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/deploy"
	"github.com/tally-hq/tally/internal/dynamotest"
	"github.com/tally-hq/tally/internal/lambdafn/fanout"
	"github.com/tally-hq/tally/internal/partitions"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/sqstest"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/store/dynamo"
	"github.com/tally-hq/tally/internal/testenv"
)

// usedActions records the IAM actions the DynamoDB calls made inside a
// Lambda invocation need (a context with a LambdaContext, as the handlers
// get; the tests' own set-up and checks have none). A transaction is
// authorized item by item: a put needs dynamodb:PutItem, and so on.
type usedActions struct {
	dynamo.API
	mu   sync.Mutex
	seen map[usedAction]bool
}

type usedAction struct {
	action, resource string // "dynamodb:GetItem", "Table" or "Table/index"
	leadingKey       string // the item's partition key, for single-item actions
	// invocation is the request id: "<function>-invocation" for the
	// pipeline's handlers (a case may run another function's handler too),
	// a UUID for the API's.
	invocation string
}

func (u *usedActions) note(ctx context.Context, action, resource string, key map[string]ddbtypes.AttributeValue) {
	lc, ok := lambdacontext.FromContext(ctx)
	if !ok {
		return
	}
	pk := ""
	if v, ok := key["pk"].(*ddbtypes.AttributeValueMemberS); ok {
		pk = v.Value
	}
	u.mu.Lock()
	u.seen[usedAction{action, resource, pk, lc.AwsRequestID}] = true
	u.mu.Unlock()
}

func (u *usedActions) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	u.note(ctx, "dynamodb:GetItem", "Table", in.Key)
	return u.API.GetItem(ctx, in, o...)
}

func (u *usedActions) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	resource := "Table"
	if aws.ToString(in.IndexName) != "" {
		resource = "Table/index"
	}
	// The partition key a query reads (the index's, for an index) is the
	// value its key condition sets first: "<name> = <value> …".
	var key map[string]ddbtypes.AttributeValue
	if _, rest, ok := strings.Cut(aws.ToString(in.KeyConditionExpression), " = "); ok {
		placeholder, _, _ := strings.Cut(rest, " ")
		key = map[string]ddbtypes.AttributeValue{"pk": in.ExpressionAttributeValues[placeholder]}
	}
	u.note(ctx, "dynamodb:Query", resource, key)
	return u.API.Query(ctx, in, o...)
}

func (u *usedActions) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	for _, it := range in.TransactItems {
		switch {
		case it.Put != nil:
			u.note(ctx, "dynamodb:PutItem", "Table", it.Put.Item)
		case it.Update != nil:
			u.note(ctx, "dynamodb:UpdateItem", "Table", it.Update.Key)
		case it.Delete != nil:
			u.note(ctx, "dynamodb:DeleteItem", "Table", it.Delete.Key)
		case it.ConditionCheck != nil:
			u.note(ctx, "dynamodb:ConditionCheckItem", "Table", it.ConditionCheck.Key)
		}
	}
	return u.API.TransactWriteItems(ctx, in, o...)
}

func (u *usedActions) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	u.note(ctx, "dynamodb:UpdateItem", "Table", in.Key)
	return u.API.UpdateItem(ctx, in, o...)
}

func (u *usedActions) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	u.note(ctx, "dynamodb:PutItem", "Table", in.Item)
	return u.API.PutItem(ctx, in, o...)
}

func (u *usedActions) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	u.note(ctx, "dynamodb:DeleteItem", "Table", in.Key)
	return u.API.DeleteItem(ctx, in, o...)
}

// forEachRecordedStore runs fn on the embedded store (used is nil) and on
// DynamoDB Local through a recorder.
func forEachRecordedStore(t *testing.T, fn func(t *testing.T, st store.Store, used *usedActions)) {
	t.Run("bolt", func(t *testing.T) { fn(t, testenv.Bolt(t), nil) })
	t.Run("dynamodb", func(t *testing.T) {
		client, table := dynamotest.NewTable(t)
		used := &usedActions{API: client, seen: map[usedAction]bool{}}
		fn(t, dynamo.New(used, table), used)
	})
}

func template(t *testing.T) *deploy.Template {
	t.Helper()
	tpl, err := deploy.Load(filepath.Join("..", "..", "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return tpl
}

// allowedFor checks that the role of functions/<dir> in the template allows
// every action recorded: least privilege is also enough privilege.
func (u *usedActions) allowedFor(t *testing.T, tpl *deploy.Template, dir string) {
	t.Helper()
	id := strings.ToUpper(dir[:1]) + dir[1:] + "Function"
	f, err := tpl.Function(id)
	if err != nil {
		t.Fatal(err)
	}
	role, err := deploy.RoleOf(f.Role)
	if err != nil {
		t.Fatal(err)
	}
	grants, _, err := tpl.RoleGrants(role)
	if err != nil {
		t.Fatal(err)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for a := range u.seen {
		if strings.HasSuffix(a.invocation, "-invocation") && a.invocation != dir+"-invocation" {
			continue // another function's handler, run by the same case
		}
		if !slices.ContainsFunc(grants, func(g deploy.Grant) bool { return allows(g, a) }) {
			t.Errorf("functions/%s did %s on %s (key %q), which %s does not allow", dir, a.action, a.resource, a.leadingKey, role)
		}
	}
}

// allows reports whether g covers a. The only condition it evaluates is
// dynamodb:LeadingKeys under ForAllValues:StringLike, as IAM does for a
// single-item action or a query: the partition key the request names (the
// index's, for a query of an index) must match one of the patterns (* for
// any characters, ? for one). Any other condition allows nothing here.
func allows(g deploy.Grant, a usedAction) bool {
	if g.Action != a.action || g.Resource != a.resource {
		return false
	}
	if g.Condition == "" {
		return true
	}
	var cond map[string]map[string][]string
	if err := json.Unmarshal([]byte(g.Condition), &cond); err != nil || len(cond) != 1 {
		return false
	}
	like, ok := cond["ForAllValues:StringLike"]
	if !ok || len(like) != 1 || a.leadingKey == "" {
		return false
	}
	return slices.ContainsFunc(like["dynamodb:LeadingKeys"], func(pattern string) bool { return partitions.StringLike(pattern, a.leadingKey) })
}

// TestStreamConversionsAreAllowed runs the AWS path of new conversions
// (service.OnAWS, as the functions wire it) through the functions that
// make and deliver their events, on DynamoDB Local, and checks that each
// function's role allows what it did: the reconciler dispatches again the
// conversion of a failed stream batch in FanoutDLQ (no subscription), the
// fan-out makes the event from the conversion's insert (no subscription,
// then one), and deliver makes attempt 1.
func TestStreamConversionsAreAllowed(t *testing.T) {
	client, table := dynamotest.NewTable(t)
	used := &usedActions{API: client, seen: map[usedAction]bool{}}
	f := newFixture(t, dynamo.New(used, table), service.OnAWS())
	tpl := template(t)
	q := f.deliveryQueue(t)

	// The fixture's conversion: its stream batch was given up.
	fanoutDLQ := sqstest.NewQueue(t, q.direct, nil)
	at := f.conversion.CreatedAt.UTC().Format(time.RFC3339Nano)
	info, _ := json.Marshal(map[string]any{"DDBStreamBatchInfo": map[string]any{"approximateArrivalOfFirstRecord": at, "approximateArrivalOfLastRecord": at}})
	if _, err := q.direct.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: &fanoutDLQ.URL, MessageBody: aws.String(string(info))}); err != nil {
		t.Fatal(err)
	}
	f.clock.Add(time.Hour)
	r := fanout.DefaultReconciler
	r.FanoutDLQ = &fanout.DLQ{Client: q.client, URL: fanoutDLQ.URL}
	res, err := r.Handler(f.svc.Webhooks, q.client, q.URL, f.cfg.Logger)(lambdaContext(t, "reconciler-invocation"), events.EventBridgeEvent{})
	if err != nil || res.Batches != 1 || res.Conversions != 1 {
		t.Fatalf("reconciler: %+v, %v; want the conversion dispatched again", res, err)
	}

	fanout := func(c tally.Conversion) {
		t.Helper()
		rec := conversionInsert(t, client, table, c.ID)
		if fails := streamFailures(fanoutCall(t, f)(events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{rec}})); len(fails) != 0 {
			t.Fatalf("fan-out failures %v", fails)
		}
	}
	fanout(f.recordConversion(t, f.offer, "order-2"))

	sub := f.subscribe(t, []string{tally.EventConversionCreated}, "", 200)
	fanout(f.recordConversion(t, f.offer, "order-3"))
	msgs := q.messages(t)
	if len(msgs) != 1 {
		t.Fatalf("%d messages, want the one delivery's", len(msgs))
	}
	if fails := queueFailures(deliverCall(t, f)(events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m0", Body: msgs[0]}}})); len(fails) != 0 {
		t.Fatalf("deliver failures %v", fails)
	}
	if n := f.receivers[sub.ID].count(); n != 1 {
		t.Errorf("the receiver got %d requests, want 1", n)
	}
	for _, fn := range []string{"reconciler", "fanout", "deliver"} {
		used.allowedFor(t, tpl, fn)
	}
}

// conversionInsert is the stream record of a conversion's insert, as the
// fan-out's event source mapping hands it over: its item as stored.
func conversionInsert(t *testing.T, client *dynamodb.Client, table, conversionID string) events.DynamoDBEventRecord {
	t.Helper()
	out, err := client.Scan(t.Context(), &dynamodb.ScanInput{
		TableName:                 aws.String(table),
		FilterExpression:          aws.String("sk = :id AND attribute_exists(fanout)"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":id": &ddbtypes.AttributeValueMemberS{Value: conversionID}},
	})
	if err != nil || len(out.Items) != 1 {
		t.Fatalf("conversion %s: %d items, %v", conversionID, len(out.Items), err)
	}
	image := map[string]events.DynamoDBAttributeValue{}
	for name, v := range out.Items[0] {
		switch v := v.(type) {
		case *ddbtypes.AttributeValueMemberS:
			image[name] = events.NewStringAttribute(v.Value)
		case *ddbtypes.AttributeValueMemberN:
			image[name] = events.NewNumberAttribute(v.Value)
		case *ddbtypes.AttributeValueMemberB:
			image[name] = events.NewBinaryAttribute(v.Value)
		default:
			t.Fatalf("attribute %s of type %T", name, v)
		}
	}
	return events.DynamoDBEventRecord{EventName: "INSERT", Change: events.DynamoDBStreamRecord{
		Keys:           map[string]events.DynamoDBAttributeValue{"pk": image["pk"], "sk": image["sk"]},
		NewImage:       image,
		SequenceNumber: "1" + conversionID,
	}}
}

// TestLeadingKeysCondition checks the role check reads a LeadingKeys
// condition as IAM does: the request's partition key against each pattern,
// for queries too; a key no pattern matches, or a request that names none,
// is refused.
func TestLeadingKeysCondition(t *testing.T) {
	g := deploy.Grant{Action: "dynamodb:Query", Resource: "Table", Condition: `{"ForAllValues:StringLike":{"dynamodb:LeadingKeys":["OFF#*","CONFIG","BRD#?#CNV#*"]}}`}
	for key, want := range map[string]bool{
		"OFF#o1": true, "CONFIG": true, "CONFIGX": false, "BRD#b#CNV#3": true, "BRD#bb#CNV#3": false,
		"BRD#b": false, "KEY#h": false, "": false,
	} {
		if got := allows(g, usedAction{action: "dynamodb:Query", resource: "Table", leadingKey: key}); got != want {
			t.Errorf("a query of %q allowed %v, want %v", key, got, want)
		}
	}
	g.Condition = `{"StringEquals":{"aws:SourceVpc":"vpc-1"}}`
	if allows(g, usedAction{action: "dynamodb:Query", resource: "Table", leadingKey: "OFF#o1"}) {
		t.Error("a condition the check cannot read allowed a request")
	}
}
