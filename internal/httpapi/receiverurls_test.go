package httpapi_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// errorMessage is error.message of an error answer, or "".
func errorMessage(r response) string {
	var e struct{ Error struct{ Message string } }
	_ = json.Unmarshal(r.body, &e)
	return e.Error.Message
}

// A receiver URL with characters a URL may hold only percent-encoded would
// be sent as given and break the receiver's request line ("POST /p?x=a
// HTTP/1.0 X HTTP/1.1"): webhook subscriptions and partner postbacks refuse
// it, made or changed, with 422 naming url, and keep what they had.
func TestReceiverURLsWithRawCharactersAreRefused(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, httpapi.Config{RateLimit: 10_000}, service.WithLoopbackReceivers())
		brandID, key := e.brand()
		partner := e.activePartner(brandID, key)
		const good = "https://receiver.example/hooks?x=a%20b"
		sub := e.must(201, e.call("POST", "/api/public/webhooks", key, map[string]any{"url": good, "events": []string{"conversion.created"}})).field(t, "id")
		pbPath := "/api/v1/partners/" + partner + "/postback"
		e.must(200, e.call("PUT", pbPath, key, map[string]any{"url": good + "&c={click_id}"}))

		for _, bad := range []string{
			"https://receiver.example/p?x=a HTTP/1.0 X",
			"http://127.0.0.1:9/p?x=a HTTP/1.0 X",
			"https://receiver.example/p?x=<b>",
			`https://receiver.example/p?x="b"`,
			"https://receiver.example/p?x=a\tb",
			"https://receiver.example/p?x=a\x00b",
			"https://receiver.example/p?x=a|b",
		} {
			for _, req := range []struct{ method, path string }{
				{"POST", "/api/public/webhooks"},
				{"PATCH", "/api/public/webhooks/" + sub},
				{"PUT", pbPath},
			} {
				r := e.call(req.method, req.path, key, map[string]any{"url": bad, "events": []string{"conversion.created"}})
				if msg := errorMessage(r); r.status != 422 || r.errorCode() != "validation_error" || !strings.HasPrefix(msg, "url ") {
					t.Errorf("%s %s with url %q: %d %s, want 422 naming url", req.method, req.path, bad, r.status, r.body)
				}
			}
		}
		var subs struct{ Data []tally.Subscription }
		e.must(200, e.call("GET", "/api/public/webhooks", key, nil)).decode(t, &subs)
		if len(subs.Data) != 1 || subs.Data[0].URL != good {
			t.Errorf("subscriptions after refused URLs: %+v, want the one with %s", subs.Data, good)
		}
		var pb tally.Postback
		e.must(200, e.call("GET", pbPath, key, nil)).decode(t, &pb)
		if pb.URL != good+"&c={click_id}" {
			t.Errorf("postback after refused URLs: %q", pb.URL)
		}
	})
}

// A postback template whose macro stands where the scheme and host belong
// says so, rather than that no URL was given.
func TestPostbackTemplateOfOnlyMacrosSaysWhatIsWrong(t *testing.T) {
	e := newEnv(t, testenv.Bolt(t), httpapi.Config{RateLimit: 10_000})
	brandID, key := e.brand()
	partner := e.activePartner(brandID, key)
	for _, tmpl := range []string{"{sub1}", "{click_id}/pb", "https://{sub1}/pb", "https://partner.example{sub1}", "https:{sub1}"} {
		r := e.call("PUT", "/api/v1/partners/"+partner+"/postback", key, map[string]any{"url": tmpl})
		if msg := errorMessage(r); r.status != 422 || strings.Contains(msg, "required") || !strings.Contains(msg, "not in the scheme or host") {
			t.Errorf("PUT postback %q: %d %s, want 422 saying macros may not stand in the scheme or host", tmpl, r.status, r.body)
		}
	}
}
