package cli_test

// End-to-end test of the tracking link's durability: the real binary under
// a stream of clicks, killed with SIGKILL, and restarted.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Every click the server answered with a redirect is there after kill -9:
// the click is committed (fsynced) before the 302 is written.
func TestClicksSurviveKill9(t *testing.T) {
	t.Parallel()
	environ := env("TALLY_RATE_LIMIT=1000000", "TALLY_CLICK_RATE_LIMIT=1000000") // one address clicks throughout
	data := t.TempDir()
	brandID, _, secret := setupBrand(t, environ, data, "Acme")

	s := serve(t, environ, "--data", data)
	in := offerInput("Clicks")
	in["destinationUrl"] = "https://shop.example.com/landing?c={click_id}"
	offerID := str(s.call(t, "POST", "/api/v1/offers", secret, in).expect(t, "POST /api/v1/offers", 201).object(t), "id")
	partnerID := str(s.call(t, "POST", "/api/public/brands/"+brandID+"/applications", "",
		map[string]any{"name": "Pat Partner", "email": "pat@example.com"}).expect(t, "apply as a partner", 201).object(t), "id")
	s.call(t, "POST", "/api/v1/partners/"+partnerID+"/approve", secret, nil).expect(t, "approve the partner", 200)

	const workers = 16
	const perWorker = 5000 // a bound in case the server never dies
	var (
		mu         sync.Mutex
		redirected []string // click ids of the answered 302s
		unexpected []string
		wg         sync.WaitGroup
	)
	enough := make(chan struct{})
	var enoughOnce sync.Once
	client := &http.Client{
		Timeout:       20 * time.Second,
		Transport:     &http.Transport{MaxIdleConnsPerHost: workers, DisableCompression: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				req, _ := http.NewRequest("GET", fmt.Sprintf("http://%s/c/%s?pid=%s&sub1=w%d-%d", s.addr, offerID, partnerID, w, i), nil)
				req.Header.Set("User-Agent", "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0")
				resp, err := client.Do(req)
				if err != nil {
					return // the server is gone
				}
				resp.Body.Close()
				loc := resp.Header.Get("Location")
				mu.Lock()
				if id, ok := strings.CutPrefix(loc, "https://shop.example.com/landing?c="); resp.StatusCode == 302 && ok {
					redirected = append(redirected, id)
					if len(redirected) >= 300 {
						enoughOnce.Do(func() { close(enough) })
					}
				} else {
					unexpected = append(unexpected, fmt.Sprintf("%d %q", resp.StatusCode, loc))
				}
				mu.Unlock()
			}
		})
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	select {
	case <-enough:
	case <-allDone:
		t.Fatalf("the workers stopped before the kill: %v", unexpected)
	case <-time.After(30 * time.Second):
		t.Fatal("fewer than 300 clicks redirected in 30 s")
	}
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s.exited(t, 10*time.Second)
	select {
	case <-allDone:
	case <-time.After(30 * time.Second):
		t.Fatal("requests still running 30 s after the kill")
	}
	mu.Lock()
	answered := append([]string(nil), redirected...)
	mu.Unlock()
	for _, u := range unexpected {
		t.Errorf("a click got neither a redirect nor a broken connection: %s", u)
	}

	// After a restart every redirected click is there, once.
	s = serve(t, environ, "--data", data)
	stored := map[string]bool{}
	cursor := ""
	for page := 0; page < 1000; page++ {
		path := "/api/v1/clicks?limit=100"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		var body struct {
			Data       []struct{ ID string }
			NextCursor *string
		}
		if err := json.Unmarshal(s.call(t, "GET", path, secret, nil).expect(t, "list clicks after the restart", 200).body, &body); err != nil {
			t.Fatal(err)
		}
		for _, c := range body.Data {
			if stored[c.ID] {
				t.Errorf("click %s listed twice", c.ID)
			}
			stored[c.ID] = true
		}
		if body.NextCursor == nil {
			break
		}
		cursor = *body.NextCursor
	}
	lost := 0
	for _, id := range answered {
		if !stored[id] {
			lost++
			if lost <= 5 {
				t.Errorf("click %s was redirected before the kill but is not stored", id)
			}
		}
	}
	t.Logf("%d clicks redirected before kill -9, %d stored after the restart (answers in flight may be stored unanswered), %d lost", len(answered), len(stored), lost)
	var report struct{ Data []struct{ Clicks int } }
	if err := json.Unmarshal(s.call(t, "GET", "/api/v1/reports", secret, nil).expect(t, "report after the restart", 200).body, &report); err != nil {
		t.Fatal(err)
	}
	if len(report.Data) != 1 || report.Data[0].Clicks != len(stored) {
		t.Errorf("the report counts %v clicks, %d are stored", report.Data, len(stored))
	}
	s.stop(t)
}
