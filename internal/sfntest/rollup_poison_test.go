package sfntest_test

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/lambdafn/rollup"
	"github.com/tally-hq/tally/internal/reports"
)

// TestRollupPoisonRecordFailsAlone puts two records no retry can read
// among conversions on the table's stream (DynamoDB Local): one without
// data, one whose data is not a conversion. The rollup function reports
// those two as batch item failures and adds the conversions around them,
// so Lambda retries from the first of them and, once the mapping's
// retries are spent, sends them to RollupDLQ; the shard goes on. A retry
// from the poison on counts nothing twice.
func TestRollupPoisonRecordFailsAlone(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	key, offerID, partnerID := f.conversionSetup(t)
	svc, post := f.conversionsFunction(t, key)
	convert := func(i int) {
		post(fmt.Sprintf(`{"offerId":%q,"partnerId":%q,"externalTxnId":"order-%d","revenueCents":1000,"payoutCents":200,"currency":"EUR"}`, offerID, partnerID, i))
	}
	poison := func(id string, data []byte) {
		k := keys.Conversion(f.brand.ID, id)
		item := map[string]types.AttributeValue{
			"pk":     &types.AttributeValueMemberS{Value: k.PK},
			"sk":     &types.AttributeValueMemberS{Value: k.SK},
			"rollup": &types.AttributeValueMemberS{Value: "stream"},
		}
		if data != nil {
			item["data"] = &types.AttributeValueMemberB{Value: data}
		}
		if _, err := f.client.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	convert(0)
	poison("cnv_nodata", nil)
	convert(1)
	poison("cnv_garbage", []byte("not a conversion"))
	convert(2)

	var recs []events.DynamoDBEventRecord
	patterns := filterPatterns(t, "RollupFunction")
	for _, rec := range f.readStream(t) {
		if matchesAny(t, patterns, rec) {
			recs = append(recs, rec)
		}
	}
	if len(recs) != 5 {
		t.Fatalf("the rollup filter passed %d records, want 3 conversions and 2 poison records", len(recs))
	}
	var poisoned []string
	for _, rec := range recs {
		if sk := rec.Change.NewImage["sk"].String(); strings.HasSuffix(sk, "cnv_nodata") || strings.HasSuffix(sk, "cnv_garbage") {
			poisoned = append(poisoned, rec.Change.SequenceNumber)
		}
	}

	h := rollup.Handler(svc.Reports, f.log)
	invoke := func(recs []events.DynamoDBEventRecord) []string {
		t.Helper()
		ev := events.DynamoDBTimeWindowEvent{DynamoDBEvent: events.DynamoDBEvent{Records: recs}}
		ev.ShardID, ev.EventSourceARN = "shardId-00000001795300000000-cccccccc", recs[0].EventSourceArn
		resp, err := h(lambdaContext(t.Context(), "rollup"), roundTrip(t, ev))
		if err != nil || resp.State == nil {
			t.Fatalf("rollup of %d records: %v, state %v (an error fails the whole batch)", len(recs), err, resp.State)
		}
		var failed []string
		for _, f := range resp.BatchItemFailures {
			failed = append(failed, f.ItemIdentifier)
		}
		slices.Sort(failed)
		return failed
	}
	report := func() (n, revenue int64) {
		t.Helper()
		now := time.Now().UTC()
		r, err := svc.Reports.Report(t.Context(), f.brand.ID, reports.ReportQuery{From: now.AddDate(0, 0, -1).Format(time.DateOnly), To: now.AddDate(0, 0, 1).Format(time.DateOnly)})
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range r.Data {
			n, revenue = n+row.Conversions, revenue+row.RevenueCents
		}
		return n, revenue
	}

	if failed := invoke(recs); !reflect.DeepEqual(failed, poisoned) {
		t.Errorf("batch item failures %v, want the poison records %v only", failed, poisoned)
	}
	if n, revenue := report(); n != 3 || revenue != 3000 {
		t.Errorf("after the batch the report has %d conversions (%d cents), want the 3 around the poison records (3000)", n, revenue)
	}
	// Lambda retries from the lowest sequence number reported.
	from := slices.IndexFunc(recs, func(r events.DynamoDBEventRecord) bool { return r.Change.SequenceNumber == poisoned[0] })
	if failed := invoke(recs[from:]); !reflect.DeepEqual(failed, poisoned) {
		t.Errorf("retry: batch item failures %v, want %v", failed, poisoned)
	}
	if n, revenue := report(); n != 3 || revenue != 3000 {
		t.Errorf("after the retry the report has %d conversions (%d cents), want 3 (3000)", n, revenue)
	}
}
