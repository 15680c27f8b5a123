package secretbox

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/dynamotest"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/secretbox/secretboxtest"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

func TestMain(m *testing.M) { dynamotest.Main(m) }

// KMS cannot run here: these tests wrap the data key with
// secretboxtest.FakeKMS; the stores are real (bbolt, DynamoDB Local).

var (
	subA = keys.Subscription("brd_a", "sub_01")
	subB = keys.Subscription("brd_a", "sub_02")
)

// A sealed secret opens to itself in its item, and in no other: moved to
// another subscription, changed, or under another deployment's data key, it
// does not open.
func TestSealedSecretOpensOnlyInItsItem(t *testing.T) {
	ctx := t.Context()
	st := testenv.Bolt(t)
	box := New(st, secretboxtest.New())
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	sealed, err := box.Seal(ctx, secret, subA)
	if err != nil || !strings.HasPrefix(sealed, prefix) || strings.Contains(sealed, secret) {
		t.Fatalf("Seal = %q, %v; want the %s prefix and no clear secret", sealed, err, prefix)
	}
	again, _ := box.Seal(ctx, secret, subA)
	if again == sealed {
		t.Errorf("two seals of one secret are equal: the nonce repeats")
	}
	if got, err := box.Open(ctx, sealed, subA); err != nil || got != secret {
		t.Errorf("Open in its item = %q, %v; want the secret", got, err)
	}
	if got, err := box.Open(ctx, sealed, subB); !errors.Is(err, ErrOpen) || got != "" {
		t.Errorf("Open in another subscription = %q, %v; want ErrOpen", got, err)
	}
	flipped := sealed[:len(sealed)-2] + map[bool]string{true: "AA", false: "BB"}[!strings.HasSuffix(sealed, "AA")]
	if _, err := box.Open(ctx, flipped, subA); !errors.Is(err, ErrOpen) {
		t.Errorf("Open of a changed seal: %v, want ErrOpen", err)
	}
	other := New(testenv.Bolt(t), secretboxtest.New())
	if _, err := other.Open(ctx, sealed, subA); !errors.Is(err, ErrOpen) {
		t.Errorf("Open under another deployment's data key: %v, want ErrOpen", err)
	}
}

// Secrets written in clear before sealing read as they are, and no secret
// stays none; a process given no key reads clear secrets and seals nothing.
func TestClearSecretsReadAsWritten(t *testing.T) {
	ctx := t.Context()
	box := New(testenv.Bolt(t), secretboxtest.New())
	for _, clear := range []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "my own tally secret 123", ""} {
		if got, err := box.Open(ctx, clear, subA); err != nil || got != clear {
			t.Errorf("Open(%q) = %q, %v; want it as written", clear, got, err)
		}
	}
	if sealed, err := box.Seal(ctx, "", subA); sealed != "" || err != nil {
		t.Errorf("Seal of no secret = %q, %v; want none", sealed, err)
	}
	var none *Box
	if _, err := none.Seal(ctx, "a secret to seal", subA); !errors.Is(err, errNoKey) {
		t.Errorf("Seal without a key: %v, want errNoKey", err)
	}
	if got, err := none.Open(ctx, "clear", subA); got != "clear" || err != nil {
		t.Errorf("Open of a clear secret without a key = %q, %v", got, err)
	}
}

// Processes that need the data key at once, none made yet, end up with one:
// the first conditional put wins, the others read it; each opens what any
// other sealed.
func TestRacingProcessesShareOneDataKey(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		kms := secretboxtest.New()
		const n = 8
		boxes, sealed := make([]*Box, n), make([]string, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			boxes[i] = New(st, kms)
			wg.Go(func() {
				<-start
				sealed[i], errs[i] = boxes[i].Seal(t.Context(), "secret of process "+string(rune('a'+i)), subA)
			})
		}
		close(start)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		for i, b := range boxes {
			for j, s := range sealed {
				if got, err := b.Open(t.Context(), s, subA); err != nil || got != "secret of process "+string(rune('a'+j)) {
					t.Errorf("process %d opens process %d's seal as %q, %v", i, j, got, err)
				}
			}
		}
		if kms.Generated.Load() < 1 {
			t.Errorf("no data key generated")
		}
		it, err := st.Get(t.Context(), keys.SecretKey())
		if err != nil || len(it.Bins["wrapped"]) == 0 {
			t.Fatalf("data key item: %+v, %v", it, err)
		}
	})
}

// A process unwraps the data key once, and again every KeyRefresh: KMS
// sees a Decrypt per instance and quarter of an hour, none per secret.
func TestDataKeyUnwrappedOncePerRefresh(t *testing.T) {
	ctx := t.Context()
	st := testenv.Bolt(t)
	kms := secretboxtest.New()
	sealed, err := New(st, kms).Seal(ctx, "a secret of at least 16", subA)
	if err != nil {
		t.Fatal(err)
	}
	clock := testenv.NewClock(testenv.Start())
	box := New(st, kms)
	box.clock = clock.Now
	open := func(times int) {
		t.Helper()
		for range times {
			if _, err := box.Open(ctx, sealed, subA); err != nil {
				t.Fatal(err)
			}
		}
	}
	open(100)
	if got := kms.Decrypted.Load(); got != 1 {
		t.Errorf("100 opens: %d Decrypt calls, want 1", got)
	}
	clock.Advance(KeyRefresh - time.Second)
	open(1)
	clock.Advance(time.Second)
	open(100)
	if got := kms.Decrypted.Load(); got != 2 {
		t.Errorf("after %v: %d Decrypt calls, want 2", KeyRefresh, got)
	}
}
