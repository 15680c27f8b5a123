package apiclient_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tally-hq/tally/internal/apiclient"
	"github.com/tally-hq/tally/internal/dynamotest"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

func TestMain(m *testing.M) { dynamotest.Main(m) }

// TestClientIsGeneratedFromTheDocument generates the client again from
// docs/openapi.yaml with the pinned oapi-codegen (go tool) and its
// configuration here, and compares it with the committed one, which must
// compile to be committed at all: the document generates a working client
// as it stands. After changing the document, run go generate here.
func TestClientIsGeneratedFromTheDocument(t *testing.T) {
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	// The tool at the version go.mod pins, run in a folder of its own,
	// where the configuration's output lands.
	dir := t.TempDir()
	tool := filepath.Join(dir, "oapi-codegen")
	if msg, err := exec.Command("go", "build", "-o", tool, "github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen").CombinedOutput(); err != nil {
		t.Fatalf("build oapi-codegen: %v\n%s", err, msg)
	}
	cmd := exec.Command(tool, "-config", filepath.Join(here, "oapi-codegen.yaml"), filepath.Join(here, "../../docs/openapi.yaml"))
	cmd.Dir = dir
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("oapi-codegen: %v\n%s", err, msg)
	}
	fresh, err := os.ReadFile(filepath.Join(dir, "client.gen.go"))
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile("client.gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fresh, committed) {
		t.Errorf("client.gen.go is not what oapi-codegen makes of docs/openapi.yaml now: run go generate ./internal/apiclient")
	}
}

// server serves the API over real HTTP on st, with a rate limit of limit.
func server(t *testing.T, st store.Store, limit int, opts ...service.Option) (*service.Service, string) {
	svc := servicetest.New(st, append(opts, service.WithLoopbackReceivers())...)
	srv := httptest.NewServer(httpapi.New(svc.API(), httpapi.Config{RateLimit: limit, ApplicationRateLimit: limit, Logger: slog.New(slog.DiscardHandler)}).Handler())
	t.Cleanup(srv.Close)
	return svc, srv.URL
}

func bearer(key string) apiclient.ClientOption {
	return apiclient.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+key)
		return nil
	})
}

func ptr[T any](v T) *T { return &v }

// TestClientDecodesRealAnswers drives the API through the generated client
// and checks that what it decodes, successes and errors alike, carries what
// the server said: typed bodies, error codes and messages, headers.
func TestClientDecodesRealAnswers(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		ctx := t.Context()
		svc, base := server(t, st, 1000)
		brand, err := svc.Identity.CreateBrand(ctx, "Acme")
		if err != nil {
			t.Fatal(err)
		}
		_, key, err := svc.Identity.CreateAPIKey(ctx, brand.ID)
		if err != nil {
			t.Fatal(err)
		}
		c, err := apiclient.NewClientWithResponses(base, bearer(key))
		if err != nil {
			t.Fatal(err)
		}
		anon, err := apiclient.NewClientWithResponses(base)
		if err != nil {
			t.Fatal(err)
		}

		// An offer, with a destination that carries a macro.
		created, err := c.CreateOfferWithResponse(ctx, apiclient.CreateOfferJSONRequestBody{
			Name: "Shoes", DestinationUrl: "https://shop.example/p?c={click_id}", RevenueCents: 1000, PayoutCents: ptr[apiclient.Cents](300),
			Currency: apiclient.USD, Caps: &apiclient.CapsInput{Daily: ptr[apiclient.CapLimit](2)},
		})
		if err != nil || created.JSON201 == nil {
			t.Fatalf("create offer: %v %d %s", err, created.StatusCode(), created.Body)
		}
		offer := created.JSON201
		if offer.Name != "Shoes" || offer.DestinationUrl != "https://shop.example/p?c={click_id}" || offer.Caps.Daily == nil || *offer.Caps.Daily != 2 ||
			created.Headers201 == nil || created.Headers201.XRateLimitLimit != 1000 || !strings.HasPrefix(created.Headers201.XRequestId, "req_") {
			t.Errorf("created offer decoded as %+v, headers %+v", offer, created.Headers201)
		}
		list, err := c.ListOffersWithResponse(ctx, &apiclient.ListOffersParams{Limit: ptr(10)})
		if err != nil || list.JSON200 == nil || len(list.JSON200.Data) != 1 || list.JSON200.Data[0].Id != offer.Id || list.JSON200.NextCursor != nil {
			t.Fatalf("list offers: %v %s", err, list.Body)
		}

		// A partner through the form (no key), approved, and a conversion.
		applied, err := anon.SubmitApplicationWithResponse(ctx, brand.ID, apiclient.SubmitApplicationJSONRequestBody{Name: "Pat", Email: "pat@example.com"})
		if err != nil || applied.JSON201 == nil || applied.JSON201.Status != apiclient.PartnerStatusApplied {
			t.Fatalf("apply: %v %s", err, applied.Body)
		}
		partner := applied.JSON201
		if r, err := c.ApprovePartnerWithResponse(ctx, partner.Id); err != nil || r.JSON200 == nil || r.JSON200.Status != apiclient.PartnerStatusActive {
			t.Fatalf("approve partner: %v %s", err, r.Body)
		}
		conv := apiclient.CreateConversionJSONRequestBody{OfferId: &offer.Id, PartnerId: &partner.Id, ExternalTxnId: ptr("order-1")}
		first, err := c.CreateConversionWithResponse(ctx, conv)
		if err != nil || first.JSON201 == nil || first.JSON201.RevenueCents != 1000 {
			t.Fatalf("conversion: %v %s", err, first.Body)
		}
		replay, err := c.CreateConversionWithResponse(ctx, conv)
		if err != nil || replay.JSON200 == nil || replay.JSON200.Id != first.JSON201.Id {
			t.Errorf("replayed conversion: %v %s, want 200 with the first", err, replay.Body)
		}
		report, err := c.GetReportWithResponse(ctx, &apiclient.GetReportParams{})
		if err != nil || report.JSON200 == nil || len(report.JSON200.Data) != 1 || report.JSON200.Data[0].Conversions != 1 {
			t.Errorf("report: %v %s", err, report.Body)
		}

		// Webhooks and the catalog, whose examples decode as the event
		// bodies of the webhooks section.
		sub, err := c.CreateSubscriptionWithResponse(ctx, apiclient.CreateSubscriptionJSONRequestBody{
			Url: "https://hooks.example.com/tally", Events: []apiclient.SubscribableEventName{apiclient.SubscribableEventNameConversionCreated}, Secret: ptr("whsec_0123456789abcdef"),
		})
		if err != nil || sub.JSON201 == nil || !sub.JSON201.HasSecret {
			t.Fatalf("subscribe: %v %s", err, sub.Body)
		}
		catalog, err := anon.ListWebhookEventsWithResponse(ctx)
		if err != nil || catalog.JSON200 == nil || len(catalog.JSON200.Data) == 0 {
			t.Fatalf("catalog: %v %s", err, catalog.Body)
		}
		example, err := catalog.JSON200.Data[0].Example.AsConversionCreatedEvent()
		if err != nil || example.Data.ConversionId == "" || example.Data.Currency == "" {
			t.Errorf("the catalog's first example as a conversion.created body: %+v %v", example, err)
		}

		// Errors decode with their code and message.
		checkError := func(what string, status int, got *http.Response, code, message string, wantCode string) {
			t.Helper()
			if got.StatusCode != status || code != wantCode || message == "" {
				t.Errorf("%s: %d code %q message %q, want %d %s with a message", what, got.StatusCode, code, message, status, wantCode)
			}
		}
		if r, err := anon.ListOffersWithResponse(ctx, nil); err != nil || r.JSON401 == nil {
			t.Errorf("list without a key: %v %s", err, r.Body)
		} else {
			checkError("list without a key", 401, r.HTTPResponse, string(r.JSON401.Error.Code), r.JSON401.Error.Message, "unauthorized")
		}
		if r, err := c.GetOfferWithResponse(ctx, "off_01jd0000000000000000000000"); err != nil || r.JSON404 == nil {
			t.Errorf("unknown offer: %v %s", err, r.Body)
		} else {
			checkError("unknown offer", 404, r.HTTPResponse, string(r.JSON404.Error.Code), r.JSON404.Error.Message, "not_found")
		}
		if r, err := c.CreateOfferWithResponse(ctx, apiclient.CreateOfferJSONRequestBody{Name: "Boots", DestinationUrl: "ftp://x", Currency: apiclient.USD}); err != nil || r.JSON422 == nil {
			t.Errorf("invalid offer: %v %s", err, r.Body)
		} else {
			checkError("invalid offer", 422, r.HTTPResponse, string(r.JSON422.Error.Code), r.JSON422.Error.Message, "validation_error")
		}
		if r, err := c.CreateOfferWithBodyWithResponse(ctx, "application/json", strings.NewReader(`{"name":`)); err != nil || r.JSON400 == nil {
			t.Errorf("malformed body: %v %s", err, r.Body)
		} else {
			checkError("malformed body", 400, r.HTTPResponse, string(r.JSON400.Error.Code), r.JSON400.Error.Message, "invalid_json")
		}
		if r, err := c.ApprovePartnerWithResponse(ctx, partner.Id); err != nil || r.JSON409 == nil {
			t.Errorf("approve twice: %v %s", err, r.Body)
		} else {
			checkError("approve twice", 409, r.HTTPResponse, string(r.JSON409.Error.Code), r.JSON409.Error.Message, "invalid_transition")
		}
		c.CreateConversionWithResponse(ctx, apiclient.CreateConversionJSONRequestBody{OfferId: &offer.Id, PartnerId: &partner.Id, ExternalTxnId: ptr("order-2")})
		if r, err := c.CreateConversionWithResponse(ctx, apiclient.CreateConversionJSONRequestBody{OfferId: &offer.Id, PartnerId: &partner.Id, ExternalTxnId: ptr("order-3")}); err != nil || r.JSON422 == nil {
			t.Errorf("past the daily cap: %v %s", err, r.Body)
		} else {
			checkError("past the daily cap", 422, r.HTTPResponse, string(r.JSON422.Error.Code), r.JSON422.Error.Message, "cap_reached")
		}

		// Past the rate limit: 429 with the headers.
		_, limitedBase := server(t, st, 1, service.WithClock(testenv.MidMinute().Now))
		limited, err := apiclient.NewClientWithResponses(limitedBase, bearer(key))
		if err != nil {
			t.Fatal(err)
		}
		var r *apiclient.ListOffersResponse
		for range 2 {
			if r, err = limited.ListOffersWithResponse(ctx, nil); err != nil {
				t.Fatal(err)
			}
		}
		if r.JSON429 == nil || r.Headers429 == nil || r.Headers429.RetryAfter < 1 || r.Headers429.XRateLimitRemaining != 0 {
			t.Errorf("past the limit: %d %s headers %+v", r.StatusCode(), r.Body, r.Headers429)
		} else {
			checkError("past the limit", 429, r.HTTPResponse, string(r.JSON429.Error.Code), r.JSON429.Error.Message, "rate_limit_exceeded")
		}
	})
}
