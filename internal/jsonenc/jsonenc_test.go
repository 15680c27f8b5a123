package jsonenc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/tally-hq/tally"
)

// tricky strings: every escape encoding/json makes, in both HTML modes.
var tricky = []string{"", "plain", `a"b\c`, "<b>&amp;</b>", "\x00\x01\b\f\n\r\t\x1f\x7f", "é€😀", "\u2028\u2029", "bad \xff\xfe utf8 \xe2\x82", "ünïcode<&>\u2028"}

// marshal is what encoding/json writes for v in each mode.
func marshal(t *testing.T, v any, html HTML) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(bool(html))
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func TestString(t *testing.T) {
	for _, html := range []HTML{EscapeHTML, KeepHTML} {
		for _, s := range tricky {
			if got, want := String([]byte("x"), s, html), append([]byte("x"), marshal(t, s, html)...); !bytes.Equal(got, want) {
				t.Errorf("html %v, %q:\ngot  %s\nwant %s", html, s, got, want)
			}
		}
	}
}

// fill sets every field of the struct v points to, field i to a value
// made from seed+i. A field of a type it does not know fails the test:
// the encoders must learn it first.
func fill(t *testing.T, v reflect.Value, seed int, only int) {
	t.Helper()
	v = v.Elem()
	for i := range v.NumField() {
		if only >= 0 && i != only {
			continue
		}
		f, n := v.Field(i), seed+i
		at := tally.NewTime(time.Date(2026, 11, 28, 9, 0, n, n*1e6, time.UTC))
		switch p := f.Addr().Interface().(type) {
		case *string:
			*p = fmt.Sprintf("%s%d", tricky[n%len(tricky)], n)
		case *int:
			*p = n*7 - 3
		case *int64:
			*p = int64(n) * -1_000_000_007
		case *tally.Time:
			*p = at
		case **tally.Time:
			*p = &at
		case *[]string:
			*p = []string{tricky[n%len(tricky)], fmt.Sprint(n)}
		default:
			t.Fatalf("%s.%s: a %s, which the test (and the encoder) does not know", v.Type(), v.Type().Field(i).Name, f.Type())
		}
	}
}

// check compares enc's output with encoding/json's for values of T with no
// field set, every field set (several times over), and each field set alone:
// a field added to T and not to the encoder fails it.
func check[T any](t *testing.T, enc func([]byte, *T, HTML) []byte) {
	var zero T
	n := reflect.TypeOf(zero).NumField()
	var values []T
	values = append(values, zero)
	for seed := range len(tricky) {
		var v T
		fill(t, reflect.ValueOf(&v), seed, -1)
		values = append(values, v)
	}
	for i := range n {
		var v T
		fill(t, reflect.ValueOf(&v), 1, i)
		values = append(values, v)
	}
	var empty T // a []string empty rather than nil
	for i := range n {
		if f := reflect.ValueOf(&empty).Elem().Field(i); f.Kind() == reflect.Slice {
			f.Set(reflect.MakeSlice(f.Type(), 0, 0))
		}
	}
	values = append(values, empty)
	for _, v := range values {
		for _, html := range []HTML{EscapeHTML, KeepHTML} {
			got, want := enc([]byte("prefix"), &v, html), append([]byte("prefix"), marshal(t, v, html)...)
			if !bytes.Equal(got, want) {
				t.Errorf("%T, html %v:\ngot  %s\nwant %s", v, html, got, want)
			}
		}
	}
}

func TestConversion(t *testing.T)          { check(t, Conversion) }
func TestClick(t *testing.T)               { check(t, Click) }
func TestConversionEventData(t *testing.T) { check(t, ConversionEventData) }

func BenchmarkConversion(b *testing.B) {
	at := tally.NewTime(time.Now())
	c := tally.Conversion{ID: "cnv_01kb7k3m5n6p7q8r9s0t1v2w3x", BrandID: "brd_01kb7k3m5n6p7q8r9s0t1v2w3x", OfferID: "off_01kb7k3m5n6p7q8r9s0t1v2w3x",
		PartnerID: "prt_01kb7k3m5n6p7q8r9s0t1v2w3x", RevenueCents: 1000, PayoutCents: 300, Currency: "USD", Status: tally.ConversionApproved,
		ExternalTxnID: "load-1764320000-1-12345", ApprovedAt: &at, CreatedAt: at, UpdatedAt: at}
	b.Run("jsonenc", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 640) // as the callers size it
		for b.Loop() {
			buf = Conversion(buf[:0], &c, EscapeHTML)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(c)
		}
	})
}
