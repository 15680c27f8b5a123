package sfntest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/aws/smithy-go/logging"
	"gopkg.in/yaml.v3"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/lambdafn/api"
	"github.com/tally-hq/tally/internal/lambdafn/fanout"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/sfntest"
	"github.com/tally-hq/tally/internal/sqstest"
	"github.com/tally-hq/tally/internal/webhooks"
	"github.com/tally-hq/tally/webhook"
)

// TestAWSPath follows a conversion through the webhook pipeline as it runs
// on AWS, with every step the real handler and DynamoDB Local as the table:
// the conversions API function records it (and its event, in the same
// transaction); the table's stream, read with the DynamoDB Streams API and
// filtered with the FanoutFunction's FilterCriteria from template.yaml,
// feeds the fanout function; its queue messages feed the deliver function,
// whose attempt 1 fails and which starts the retry workflow; local-sfn runs
// that execution, whose task, the attempt step, delivers on the first retry.
// The partner's postback, set through the partners function, rides the
// same path: the fan-out makes its delivery next to the webhook's, and its
// GET fails once and succeeds on the retry too. The conversion comes with
// a traceparent, and every attempt of both carries its trace.
//
// What stands in for AWS: the event source mappings (this test reads the
// stream and batches the records, and receives the queue's messages and
// deletes the ones the deliver function did not report, as
// sqstest.Receive and Finish do); SQS is fauxqs, reached by the client
// the fanout uses (internal/sqsjson); Step Functions' API is sfntest.Server, reached by the
// SDK client the deliver function uses, whose execution runs in local-sfn.
func TestAWSPath(t *testing.T) {
	t.Parallel()
	sfntest.Find(t)
	ctx := t.Context()
	f := newFixture(t)
	rcv := newReceiver(t, func(n int) int {
		if n == 1 {
			return http.StatusBadGateway
		}
		return http.StatusOK
	})
	f.subscribe(t, rcv.URL, secret, tally.EventConversionCreated)
	key, offerID, partnerID := f.conversionSetup(t)
	pbRcv := newReceiver(t, func(n int) int {
		if n == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusNoContent
	})
	// The partners function, over the set-up service: the receiver is on
	// loopback, which only the local server accepts.
	partners, err := api.APIHandler(f.svc.API(), httpapi.Config{Logger: f.log}, httpapi.GroupPartners)
	if err != nil {
		t.Fatal(err)
	}
	pbBody := fmt.Sprintf(`{"url":%q}`, pbRcv.URL+"/pb?cnv={conversion_id}&pay={payout}&cur={currency}&s1={sub1}")
	resp, err := partners(lambdaContext(ctx, "partners"), roundTrip(t, apiEvent("PUT", "/api/v1/partners/"+partnerID+"/postback", key, pbBody)))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT the postback: %v, status %d: %s", err, resp.StatusCode, resp.Body)
	}

	// The conversions function records a conversion.
	api, err := api.APIHandler(f.function().API(), httpapi.Config{Logger: f.log}, httpapi.GroupConversions)
	if err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`{"offerId":%q,"partnerId":%q,"externalTxnId":"order-100234","revenueCents":8990,"payoutCents":1500,"currency":"EUR","sub1":"newsletter-nov"}`, offerID, partnerID)
	const callerTraceID, callerSpanID = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	traced := apiEvent("POST", "/api/v1/conversions", key, body)
	traced.Headers["traceparent"] = "00-" + callerTraceID + "-" + callerSpanID + "-01"
	resp, err = api(lambdaContext(ctx, "conversions"), roundTrip(t, traced))
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /api/v1/conversions: %v, status %d: %s", err, resp.StatusCode, resp.Body)
	}
	var conv tally.Conversion
	if err := json.Unmarshal([]byte(resp.Body), &conv); err != nil || conv.ID == "" {
		t.Fatalf("conversion %s: %v", resp.Body, err)
	}

	// The stream, filtered as the event source mapping filters it.
	records := f.readStream(t)
	patterns := filterPatterns(t, "FanoutFunction")
	var batch []events.DynamoDBEventRecord
	for _, rec := range records {
		if matchesAny(t, patterns, rec) {
			batch = append(batch, rec)
		}
	}
	if len(batch) == 0 || len(batch) == len(records) {
		t.Fatalf("the filter passed %d of the stream's %d records; want the event inserts only", len(batch), len(records))
	}
	// The events of the set-up, and the new conversion, whose event the
	// fan-out makes.
	for _, rec := range batch {
		pk := rec.Change.Keys["pk"].String()
		if rec.EventName != "INSERT" || !strings.HasPrefix(pk, "EVT#") && rec.Change.Keys["sk"].String() != conv.ID {
			t.Errorf("the filter passed a %s of %s", rec.EventName, pk)
		}
	}

	// The fanout function, in batches of 100 (the mapping's BatchSize),
	// sending to the delivery queue (visibility and redrive as deployed).
	sqsClient := sqstest.NewClient(sqstest.Endpoint(t))
	deliveryQueue, _ := sqstest.NewQueueWithDLQ(t, sqsClient, 180*time.Second, 5)
	fanout := fanout.Handler(f.function().Webhooks, sqstest.NewSender(sqstest.Endpoint(t)), deliveryQueue.URL, f.log)
	for chunk := range slices.Chunk(batch, 100) {
		out, err := fanout(lambdaContext(ctx, "fanout"), roundTrip(t, events.DynamoDBEvent{Records: chunk}))
		if err != nil || len(out.BatchItemFailures) > 0 {
			t.Fatalf("fanout: %v, failures %+v", err, out.BatchItemFailures)
		}
	}
	msgs := sqstest.ReceiveN(t, sqsClient, deliveryQueue, 3, time.Second)
	if len(msgs) != 2 {
		t.Fatalf("the fanout queued %d messages, want 2 (one subscription to conversion.created, one postback)", len(msgs))
	}
	// Each message carries its delivery, which attempt 1 writes.
	var ref, pbRef endpoints.DeliveryRef
	for _, m := range msgs {
		var r webhooks.DeliveryMessage
		var d tally.Delivery
		if err := json.Unmarshal([]byte(m.Body), &r); err != nil || r.BrandID != f.brand.ID || json.Unmarshal(r.Planned, &d) != nil {
			t.Fatalf("queue message %s: %v", m.Body, err)
		}
		if _, err := f.function().Deliveries.Delivery(ctx, r.BrandID, r.DeliveryID); tally.ErrorCode(err) != tally.ECodeNotFound {
			t.Fatalf("delivery %s before attempt 1: %v, want not written", r.DeliveryID, err)
		}
		if d.Type == tally.DeliveryPostback {
			pbRef = r.DeliveryRef
		} else {
			ref = r.DeliveryRef
		}
	}
	if ref.DeliveryID == "" || pbRef.DeliveryID == "" {
		t.Fatalf("the queued deliveries are not one webhook and one postback: %v", msgs)
	}

	// The deliver function: attempt 1 of each fails and starts the
	// retries. The messages are then deleted from the queue.
	started := f.deliver(t, msgs...)
	wantNames := []string{ref.DeliveryID + "-0", pbRef.DeliveryID + "-0"}
	slices.Sort(started)
	slices.Sort(wantNames)
	if !slices.Equal(started, wantNames) {
		t.Fatalf("the deliver function started %v, want executions %v", started, wantNames)
	}
	if n, m := len(rcv.requests()), len(pbRcv.requests()); n != 1 || m != 1 {
		t.Fatalf("the receivers got %d and %d requests from the deliver function, want 1 each", n, m)
	}
	sqstest.Finish(t, sqsClient, deliveryQueue, msgs, events.SQSEventResponse{})

	// The retry workflows.
	for _, name := range started {
		res := f.workflow.Wait(t, name)
		var out executionOutput
		if err := json.Unmarshal(res.Output, &out); res.Status != sfntest.StatusSucceeded || err != nil ||
			out.Result.Status != tally.DeliverySucceeded || out.Result.Attempts != 2 {
			t.Errorf("the execution %s ended %v, want succeeded after 2 attempts\ntask runs: %+v", name, res, f.taskRuns(t))
		}
	}

	// The partner got the postback twice, filled in, as GETs.
	pbReqs := pbRcv.requests()
	wantURI := "/pb?cnv=" + conv.ID + "&pay=15.00&cur=EUR&s1=newsletter-nov"
	for i, r := range pbReqs {
		if r.method != http.MethodGet || r.uri != wantURI || len(r.body) != 0 || r.header.Get(webhook.WebhookIDHeader) != pbRef.DeliveryID {
			t.Errorf("postback request %d: %s %s (%d body bytes, id %q), want GET %s", i+1, r.method, r.uri, len(r.body), r.header.Get(webhook.WebhookIDHeader), wantURI)
		}
	}
	pb, err := f.function().Deliveries.Delivery(ctx, pbRef.BrandID, pbRef.DeliveryID)
	if err != nil {
		t.Fatal(err)
	}
	wantTrace := func(what string, reqs []request) {
		t.Helper()
		spans := map[string]bool{callerSpanID: true}
		for i, r := range reqs {
			parts := strings.Split(r.header.Get("traceparent"), "-")
			if len(parts) != 4 || parts[0] != "00" || parts[1] != callerTraceID || len(parts[2]) != 16 || spans[parts[2]] || parts[3] != "01" {
				t.Errorf("%s request %d: traceparent %q, want trace %s with a new parent id", what, i+1, r.header.Get("traceparent"), callerTraceID)
			}
			spans[parts[2]] = true
		}
	}
	wantTrace("postback", pbReqs)
	wantTrace("webhook", rcv.requests())
	if len(pbReqs) != 2 || pb.Status != tally.DeliverySucceeded || len(pb.Attempts) != 2 || pb.PartnerID != partnerID || pb.URL != pbRcv.URL+wantURI {
		t.Errorf("postback delivery %+v after %d requests, want succeeded on attempt 2", pb, len(pbReqs))
	}
	if left := sqstest.Receive(t, sqsClient, deliveryQueue, 10, 0); len(left) != 0 {
		t.Errorf("the queue still has %d messages", len(left))
	}

	// The receiver has the conversion.created event, signed.
	reqs := rcv.requests()
	if len(reqs) != 2 {
		t.Fatalf("the receiver got %d requests, want 2", len(reqs))
	}
	for i, r := range reqs {
		if err := webhook.Verify(secret, r.header.Get(webhook.SignatureHeader), r.body, webhook.DefaultTolerance); err != nil {
			t.Errorf("request %d: %v", i+1, err)
		}
		if got := r.header.Get(webhook.WebhookIDHeader); got != ref.DeliveryID {
			t.Errorf("request %d: %s = %q, want %q", i+1, webhook.WebhookIDHeader, got, ref.DeliveryID)
		}
		if got := r.header.Get(webhook.EventHeader); got != tally.EventConversionCreated {
			t.Errorf("request %d: %s = %q, want %q", i+1, webhook.EventHeader, got, tally.EventConversionCreated)
		}
	}
	var env tally.Event
	if err := json.Unmarshal(reqs[1].body, &env); err != nil {
		t.Fatalf("the delivered body is not an envelope: %v: %s", err, reqs[1].body)
	}
	var data tally.ConversionEventData
	if err := json.Unmarshal(env.Data, &data); err != nil {
		t.Fatal(err)
	}
	want := tally.ConversionEventData{ConversionID: conv.ID, PartnerID: partnerID, OfferID: offerID, RevenueCents: 8990,
		PayoutCents: 1500, Currency: "EUR", Status: conv.Status, Sub1: "newsletter-nov", ExternalTxnID: "order-100234"}
	if env.Event != tally.EventConversionCreated || env.BrandID != f.brand.ID || !strings.HasPrefix(env.ID, "evt_") || data != want {
		t.Errorf("delivered envelope %s, want a %s of brand %s with data %+v", reqs[1].body, tally.EventConversionCreated, f.brand.ID, want)
	}

	// The delivery log in the table.
	d, err := f.function().Deliveries.Delivery(ctx, ref.BrandID, ref.DeliveryID)
	if err != nil {
		t.Fatal(err)
	}
	if d.Status != tally.DeliverySucceeded || len(d.Attempts) != 2 || d.Attempts[0].StatusCode != http.StatusBadGateway ||
		d.Attempts[1].StatusCode != http.StatusOK || d.EventID != env.ID {
		t.Errorf("delivery %+v, want succeeded on attempt 2 of event %s", d, env.ID)
	}
}

// conversionSetup makes what a conversion needs: an API key, an offer with
// automatic approval and an active partner.
func (f *fixture) conversionSetup(t *testing.T) (key, offerID, partnerID string) {
	t.Helper()
	ctx := t.Context()
	_, key, err := f.svc.Identity.CreateAPIKey(ctx, f.brand.ID)
	if err != nil {
		t.Fatal(err)
	}
	str := func(s string) *string { return &s }
	cents := func(n int64) *int64 { return &n }
	hold := 0
	offer, err := f.svc.Offers.CreateOffer(ctx, f.brand.ID, offers.OfferInput{
		Name: str("Trail Shoes"), DestinationURL: str("https://shop.example.com/trail?click={click_id}"),
		RevenueCents: cents(4500), PayoutCents: cents(1200), Currency: str("EUR"), Approval: str(tally.ApprovalAuto), HoldHours: &hold,
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.svc.Partners.Apply(ctx, f.brand.ID, partners.ApplicationInput{Name: str("Trail Deals"), Email: str("hello@traildeals.example")})
	if err != nil {
		t.Fatal(err)
	}
	if p, err = f.svc.Partners.ApprovePartner(ctx, f.brand.ID, p.ID); err != nil {
		t.Fatal(err)
	}
	return key, offer.ID, p.ID
}

// apiEvent is an API Gateway HTTP API request (payload format 2.0) through
// the $default stage.
func apiEvent(method, path, key, body string) events.APIGatewayV2HTTPRequest {
	const domain = "a1b2c3d4e5.execute-api.us-east-1.amazonaws.com"
	return events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: method + " " + path, RawPath: path,
		Headers: map[string]string{
			"authorization": "Bearer " + key, "content-type": "application/json", "accept": "application/json",
			"host": domain, "x-forwarded-for": "198.51.100.7", "x-forwarded-proto": "https",
		},
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			AccountID: "123456789012", APIID: "a1b2c3d4e5", DomainName: domain, DomainPrefix: "a1b2c3d4e5",
			RequestID: "Vx3kjH0TDoEEMbQ=", RouteKey: method + " " + path, Stage: "$default",
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: method, Path: path, Protocol: "HTTP/1.1", SourceIP: "198.51.100.7"},
		},
		Body: body,
	}
}

// readStream reads every record of the table's stream from its start
// (TRIM_HORIZON) and turns them into the records of a Lambda event, as the
// event source mapping does. (The mapping starts at LATEST, before any of
// this test's writes, which comes to the same.)
func (f *fixture) readStream(t *testing.T) []events.DynamoDBEventRecord {
	t.Helper()
	ctx := t.Context()
	desc, err := f.client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(f.table)})
	if err != nil {
		t.Fatal(err)
	}
	streamARN := aws.ToString(desc.Table.LatestStreamArn)
	if streamARN == "" {
		t.Fatalf("table %s has no stream", f.table)
	}
	streams := dynamodbstreams.New(dynamodbstreams.Options{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("tally", "tally", ""),
		BaseEndpoint: aws.String(f.endpoint),
		Logger: logging.LoggerFunc(func(c logging.Classification, format string, v ...any) {
			t.Logf("aws sdk %s: "+format, append([]any{c}, v...)...)
		}),
	})
	var shards []streamtypes.Shard
	in := &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(streamARN)}
	for {
		out, err := streams.DescribeStream(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		shards = append(shards, out.StreamDescription.Shards...)
		if in.ExclusiveStartShardId = out.StreamDescription.LastEvaluatedShardId; in.ExclusiveStartShardId == nil {
			break
		}
	}
	var records []events.DynamoDBEventRecord
	for _, shard := range shards {
		it, err := streams.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{
			StreamArn: aws.String(streamARN), ShardId: shard.ShardId, ShardIteratorType: streamtypes.ShardIteratorTypeTrimHorizon,
		})
		if err != nil {
			t.Fatal(err)
		}
		// An open shard always has a next iterator: stop when caught up.
		for iter := it.ShardIterator; iter != nil; {
			out, err := streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range out.Records {
				records = append(records, lambdaRecord(t, streamARN, r))
			}
			if len(out.Records) == 0 {
				break
			}
			iter = out.NextShardIterator
		}
	}
	if len(records) == 0 {
		t.Fatalf("the stream of %s has no records", f.table)
	}
	return records
}

// lambdaRecord turns a record of the Streams API into a record of the
// Lambda event.
func lambdaRecord(t *testing.T, streamARN string, r streamtypes.Record) events.DynamoDBEventRecord {
	t.Helper()
	sr := r.Dynamodb
	if sr == nil {
		t.Fatalf("stream record %s has no dynamodb part", aws.ToString(r.EventID))
	}
	rec := events.DynamoDBEventRecord{
		AWSRegion: aws.ToString(r.AwsRegion), EventID: aws.ToString(r.EventID), EventName: string(r.EventName),
		EventSource: aws.ToString(r.EventSource), EventVersion: aws.ToString(r.EventVersion), EventSourceArn: streamARN,
		Change: events.DynamoDBStreamRecord{
			ApproximateCreationDateTime: events.SecondsEpochTime{Time: aws.ToTime(sr.ApproximateCreationDateTime)},
			Keys:                        attributes(t, sr.Keys),
			NewImage:                    attributes(t, sr.NewImage),
			OldImage:                    attributes(t, sr.OldImage),
			SequenceNumber:              aws.ToString(sr.SequenceNumber),
			SizeBytes:                   aws.ToInt64(sr.SizeBytes),
			StreamViewType:              string(sr.StreamViewType),
		},
	}
	if id := r.UserIdentity; id != nil {
		rec.UserIdentity = &events.DynamoDBUserIdentity{Type: aws.ToString(id.Type), PrincipalID: aws.ToString(id.PrincipalId)}
	}
	return rec
}

func attributes(t *testing.T, m map[string]streamtypes.AttributeValue) map[string]events.DynamoDBAttributeValue {
	if m == nil {
		return nil
	}
	out := make(map[string]events.DynamoDBAttributeValue, len(m))
	for k, v := range m {
		out[k] = attribute(t, v)
	}
	return out
}

func attribute(t *testing.T, v streamtypes.AttributeValue) events.DynamoDBAttributeValue {
	switch v := v.(type) {
	case *streamtypes.AttributeValueMemberS:
		return events.NewStringAttribute(v.Value)
	case *streamtypes.AttributeValueMemberN:
		return events.NewNumberAttribute(v.Value)
	case *streamtypes.AttributeValueMemberB:
		return events.NewBinaryAttribute(v.Value)
	case *streamtypes.AttributeValueMemberBOOL:
		return events.NewBooleanAttribute(v.Value)
	case *streamtypes.AttributeValueMemberNULL:
		return events.NewNullAttribute()
	case *streamtypes.AttributeValueMemberSS:
		return events.NewStringSetAttribute(v.Value)
	case *streamtypes.AttributeValueMemberNS:
		return events.NewNumberSetAttribute(v.Value)
	case *streamtypes.AttributeValueMemberBS:
		return events.NewBinarySetAttribute(v.Value)
	case *streamtypes.AttributeValueMemberL:
		l := make([]events.DynamoDBAttributeValue, len(v.Value))
		for i, e := range v.Value {
			l[i] = attribute(t, e)
		}
		return events.NewListAttribute(l)
	case *streamtypes.AttributeValueMemberM:
		return events.NewMapAttribute(attributes(t, v.Value))
	}
	t.Fatalf("stream attribute of type %T", v)
	return events.DynamoDBAttributeValue{}
}

// filterPatterns reads the FilterCriteria patterns of the DynamoDB event
// of function (FanoutFunction, RollupFunction) in template.yaml: the
// deployed filter.
func filterPatterns(t *testing.T, function string) []map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("template.yaml: %v", err)
	}
	fn := lookup(&doc, "Resources", function, "Properties", "Events")
	if fn == nil || fn.Kind != yaml.MappingNode {
		t.Fatalf("template.yaml has no Resources.%s.Properties.Events", function)
	}
	var patterns []map[string]any
	for i := 1; i < len(fn.Content); i += 2 {
		ev := fn.Content[i]
		if typ := lookup(ev, "Type"); typ == nil || typ.Value != "DynamoDB" {
			continue
		}
		filters := lookup(ev, "Properties", "FilterCriteria", "Filters")
		if filters == nil || filters.Kind != yaml.SequenceNode {
			t.Fatalf("%s's %s event has no FilterCriteria.Filters", function, fn.Content[i-1].Value)
		}
		for _, filter := range filters.Content {
			p := lookup(filter, "Pattern")
			var pattern map[string]any
			if p == nil || json.Unmarshal([]byte(p.Value), &pattern) != nil {
				t.Fatalf("%s's filter %v has no JSON Pattern", function, p)
			}
			patterns = append(patterns, pattern)
		}
	}
	if len(patterns) == 0 {
		t.Fatalf("template.yaml: %s has no DynamoDB event with a filter", function)
	}
	return patterns
}

// lookup follows mapping keys from n (a document or a mapping).
func lookup(n *yaml.Node, keys ...string) *yaml.Node {
	for _, key := range keys {
		if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
			n = n.Content[0]
		}
		if n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n
}

// matchesAny applies Lambda event filtering to a record: it passes when
// any pattern matches the record as the function receives it (JSON).
func matchesAny(t *testing.T, patterns []map[string]any, rec events.DynamoDBEventRecord) bool {
	t.Helper()
	raw, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for _, p := range patterns {
		if matchObject(t, p, doc) {
			return true
		}
	}
	return false
}

// matchObject matches the filter rule syntax: nested objects, and at the
// leaves a list of which one must match: a value, or {"prefix"},
// {"suffix"}, {"exists"} or {"anything-but"}. Other operators fail the test.
func matchObject(t *testing.T, pattern, doc map[string]any) bool {
	for key, rule := range pattern {
		v, present := doc[key]
		switch rule := rule.(type) {
		case map[string]any:
			sub, ok := v.(map[string]any)
			if !present {
				sub, ok = map[string]any{}, true // its leaves are absent: {"exists": false} holds
			}
			if !ok || !matchObject(t, rule, sub) {
				return false
			}
		case []any:
			if !slices.ContainsFunc(rule, func(r any) bool { return matchLeaf(t, r, v, present) }) {
				return false
			}
		default:
			t.Fatalf("filter rule %s: %v is neither an object nor a list", key, rule)
		}
	}
	return true
}

func matchLeaf(t *testing.T, rule, v any, present bool) bool {
	op, ok := rule.(map[string]any)
	if !ok {
		return present && equalJSON(rule, v)
	}
	if len(op) != 1 {
		t.Fatalf("filter rule %v: one operator per object", op)
	}
	s, isString := v.(string)
	for name, arg := range op {
		switch name {
		case "prefix":
			return present && isString && strings.HasPrefix(s, arg.(string))
		case "suffix":
			return present && isString && strings.HasSuffix(s, arg.(string))
		case "exists":
			return present == arg.(bool)
		case "anything-but":
			if list, ok := arg.([]any); ok {
				return present && !slices.ContainsFunc(list, func(a any) bool { return equalJSON(a, v) })
			}
			return present && !equalJSON(arg, v)
		}
		t.Fatalf("filter operator %q: this test does not implement it", name)
	}
	return false
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
