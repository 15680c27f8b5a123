package sfntest_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/lambdafn/api"
	"github.com/tally-hq/tally/internal/lambdafn/fanout"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/sfntest"
	"github.com/tally-hq/tally/internal/sqstest"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/webhook"
)

// On AWS a conversion's conversion.created is not stored: the fan-out
// makes it from the conversion, and so does each retry, and the delivery
// log. A conversion decided or reversed while its delivery is retried
// still has every attempt send the event it was recorded with, byte for
// byte, and the log show that body.
func TestRetriesSendTheConversionAsCreated(t *testing.T) {
	t.Parallel()
	sfntest.Find(t)
	reverse := func(c tally.Conversion) func(*fixture) error {
		return func(f *fixture) error {
			_, err := f.function().Conversions.ReverseConversion(t.Context(), c.BrandID, c.ID, conversions.ReversalInput{Reason: ptr(tally.ReversalChargeback)})
			return err
		}
	}
	cases := []struct {
		name     string
		approval string
		change   func(c tally.Conversion) func(*fixture) error
		status   string // the conversion's after the change
	}{
		{"reversed", tally.ApprovalAuto, reverse, tally.ConversionReversed},
		{"approved", tally.ApprovalManual, func(c tally.Conversion) func(*fixture) error {
			return func(f *fixture) error {
				_, err := f.function().Conversions.ApproveConversion(t.Context(), c.BrandID, c.ID)
				return err
			}
		}, tally.ConversionApproved},
		{"rejected", tally.ApprovalManual, func(c tally.Conversion) func(*fixture) error {
			return func(f *fixture) error {
				_, err := f.function().Conversions.RejectConversion(t.Context(), c.BrandID, c.ID)
				return err
			}
		}, tally.ConversionRejected},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			f := newFixture(t)
			var change func(*fixture) error
			changeErr := make(chan error, 1)
			// Attempt 1 fails; while the receiver holds it, the conversion
			// changes, before the retry.
			rcv := newReceiver(t, func(n int) int {
				if n == 1 {
					changeErr <- change(f)
					return http.StatusBadGateway
				}
				return http.StatusOK
			})
			f.subscribe(t, rcv.URL, secret, tally.EventConversionCreated)
			key, _, partnerID := f.conversionSetup(t)
			hold := 0
			offer, err := f.svc.Offers.CreateOffer(ctx, f.brand.ID, offers.OfferInput{
				Name: ptr("Road Shoes"), DestinationURL: ptr("https://shop.example.com/road?click={click_id}"),
				RevenueCents: ptr(int64(4500)), PayoutCents: ptr(int64(1200)), Currency: ptr("EUR"), Approval: ptr(tc.approval), HoldHours: &hold,
			})
			if err != nil {
				t.Fatal(err)
			}
			conversionsFn, err := api.APIHandler(f.function().API(), httpapi.Config{Logger: f.log}, httpapi.GroupConversions)
			if err != nil {
				t.Fatal(err)
			}
			body := fmt.Sprintf(`{"offerId":%q,"partnerId":%q,"externalTxnId":"order-7","sub1":"spring"}`, offer.ID, partnerID)
			resp, err := conversionsFn(lambdaContext(ctx, "conversions"), roundTrip(t, apiEvent("POST", "/api/v1/conversions", key, body)))
			if err != nil || resp.StatusCode != http.StatusCreated {
				t.Fatalf("POST /api/v1/conversions: %v, status %d: %s", err, resp.StatusCode, resp.Body)
			}
			var recorded tally.Conversion
			if err := json.Unmarshal([]byte(resp.Body), &recorded); err != nil {
				t.Fatal(err)
			}
			change = tc.change(recorded)

			// The fan-out from the stream, the deliver function's attempt 1,
			// the retry workflow's attempt 2.
			var batch []events.DynamoDBEventRecord
			patterns := filterPatterns(t, "FanoutFunction")
			for _, rec := range f.readStream(t) {
				if matchesAny(t, patterns, rec) && rec.Change.Keys["sk"].String() == recorded.ID {
					batch = append(batch, rec)
				}
			}
			sqsClient := sqstest.NewClient(sqstest.Endpoint(t))
			queue, _ := sqstest.NewQueueWithDLQ(t, sqsClient, 180*time.Second, 5)
			fan := fanout.Handler(f.function().Webhooks, sqstest.NewSender(sqstest.Endpoint(t)), queue.URL, f.log)
			if out, err := fan(lambdaContext(ctx, "fanout"), roundTrip(t, events.DynamoDBEvent{Records: batch})); err != nil || len(batch) != 1 || len(out.BatchItemFailures) > 0 {
				t.Fatalf("fanout of %d records: %v, failures %+v", len(batch), err, out.BatchItemFailures)
			}
			msgs := sqstest.ReceiveN(t, sqsClient, queue, 1, time.Second)
			started := f.deliver(t, msgs...)
			if len(started) != 1 {
				t.Fatalf("the deliver function started %v, want one execution", started)
			}
			if err := <-changeErr; err != nil {
				t.Fatalf("%s the conversion: %v", tc.name, err)
			}
			if c, err := f.function().Conversions.Conversion(ctx, recorded.BrandID, recorded.ID); err != nil || c.Status != tc.status {
				t.Fatalf("the conversion is %q (%v), want %s", c.Status, err, tc.status)
			}
			if res := f.workflow.Wait(t, started[0]); res.Status != sfntest.StatusSucceeded {
				t.Fatalf("the execution ended %v\ntask runs: %+v", res, f.taskRuns(t))
			}

			reqs := rcv.requests()
			if len(reqs) != 2 {
				t.Fatalf("the receiver got %d requests, want 2", len(reqs))
			}
			if !bytes.Equal(reqs[1].body, reqs[0].body) {
				t.Errorf("the retry sent\n%s\nattempt 1 sent\n%s", reqs[1].body, reqs[0].body)
			}
			for i, r := range reqs {
				if err := webhook.Verify(secret, r.header.Get(webhook.SignatureHeader), r.body, webhook.DefaultTolerance); err != nil {
					t.Errorf("request %d: %v", i+1, err)
				}
			}
			var env tally.Event
			var data tally.ConversionEventData
			if err := json.Unmarshal(reqs[1].body, &env); err != nil || json.Unmarshal(env.Data, &data) != nil {
				t.Fatalf("the retry's body is not an envelope: %v: %s", err, reqs[1].body)
			}
			if env.Event != tally.EventConversionCreated || data.ConversionID != recorded.ID || data.Status != recorded.Status {
				t.Errorf("the retry sent %s, want the conversion.created of %s, %s", reqs[1].body, recorded.ID, recorded.Status)
			}
			ref := msgs[0]
			var d struct{ BrandID, DeliveryID string }
			if err := json.Unmarshal([]byte(ref.Body), &d); err != nil {
				t.Fatal(err)
			}
			shown, err := f.function().Deliveries.Delivery(ctx, d.BrandID, d.DeliveryID)
			if err != nil {
				t.Fatal(err)
			}
			if shown.Status != tally.DeliverySucceeded || shown.EventID != env.ID || shown.Request == nil || shown.Request.Body == nil || *shown.Request.Body != string(reqs[0].body) {
				t.Errorf("the delivery log shows %+v (body %v), want succeeded, with the body attempt 1 sent", shown, shown.Request)
			}
			// No conversion.created is stored.
			if _, err := f.function().DB.Get(ctx, keys.Event(env.ID)); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("the conversion.created %s is read from the table: %v, want not stored", env.ID, err)
			}
		})
	}
}
