package httpapi

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tally-hq/tally/internal/conversions"
)

// decodeConversion must decode what it takes exactly as parseBody does,
// and take nothing parseBody refuses; bodies it leaves go to parseBody.
func checkDecodeConversion(t *testing.T, body string) (taken bool) {
	t.Helper()
	var fast conversions.ConversionInput
	taken = decodeConversion([]byte(body), &fast)
	if !taken {
		if fast != (conversions.ConversionInput{}) {
			t.Errorf("%q: left, but changed the input", body)
		}
		return false
	}
	var slow conversions.ConversionInput
	if err := parseBody([]byte(body), &slow); err != nil {
		t.Errorf("%q: taken, but parseBody refuses it: %v", body, err)
	} else if !reflect.DeepEqual(fast, slow) {
		t.Errorf("%q: decoded as %s, parseBody %s", body, show(fast), show(slow))
	}
	return true
}

func show(in conversions.ConversionInput) string {
	v := reflect.ValueOf(in)
	var b strings.Builder
	for i := range v.NumField() {
		if f := v.Field(i); !f.IsNil() {
			fmt.Fprintf(&b, "%s=%v ", v.Type().Field(i).Name, f.Elem())
		}
	}
	return b.String()
}

// everyField is a body that sets every field of ConversionInput, found by
// reflection: a field added to it and not to decodeConversion fails the
// test.
func everyField(t *testing.T) string {
	typ := reflect.TypeOf(conversions.ConversionInput{})
	var parts []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch f.Type.Elem().Kind() {
		case reflect.String:
			parts = append(parts, fmt.Sprintf(`"%s":"v%dé<&>"`, name, i))
		case reflect.Int64:
			parts = append(parts, fmt.Sprintf(`"%s":%d`, name, i*1000+7))
		default:
			t.Fatalf("ConversionInput.%s: a %s, which decodeConversion does not know", f.Name, f.Type)
		}
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func TestDecodeConversion(t *testing.T) {
	takes := []string{
		`{"offerId":"off_01kb7k3m5n6p7q8r9s0t1v2w3x","partnerId":"prt_01kb7k3m5n6p7q8r9s0t1v2w3x","externalTxnId":"load-1-2-3"}`,
		`{"offerId":"off_1","partnerId":"prt_1","externalTxnId":"order-100482","revenueCents":4999,"payoutCents":750,"currency":"USD","sub1":"spring-sale"}`,
		" \t\r\n{ \"clickId\" : \"clk_1\" , \"revenueCents\" : -0 , \"sub2\" : null }\n ",
		`{}`, `{"revenueCents":0,"payoutCents":999999999999999}`, `{"sub1":""}`, `{"sub1":"日本語 😀"}`,
		everyField(t),
	}
	for _, b := range takes {
		if !checkDecodeConversion(t, b) {
			t.Errorf("%q: left to parseBody; it should be taken", b)
		}
	}
	leaves := []string{
		`{"offerId":"a\"b"}`, `{"offerId":"\u0041"}`, "{\"offerId\":\"a\tb\"}", `{"OfferId":"x"}`, `{"offerId":"x","offerId":"y"}`,
		`{"unknown":1}`, `{"revenueCents":1.5}`, `{"revenueCents":1e3}`, `{"revenueCents":01}`, `{"revenueCents":1000000000000000}`,
		`{"revenueCents":"1"}`, `{"offerId":1}`, `{"offerId":true}`, `{"offerId":"x"} x`, `{"offerId":"x",}`, `{,}`, `[]`, `null`,
		`{"offerId":"x"`, `{"offerId" "x"}`, `{"revenueCents":-}`, `{"sub1":nul}`, `{"sub1":nullx}`, "\v{}",
	}
	for _, b := range leaves {
		if checkDecodeConversion(t, b) {
			t.Errorf("%q: taken; it should be left to parseBody", b)
		}
	}
	// Bodies near the usual ones, changed at random: whatever is taken
	// must decode as parseBody decodes it.
	r := rand.New(rand.NewPCG(23, 1))
	alphabet := []byte(`{}[]":,\ -019eEnul.abx` + "\t\n")
	for range 20000 {
		b := []byte(takes[r.IntN(len(takes))])
		for range 1 + r.IntN(3) {
			i := r.IntN(len(b))
			switch r.IntN(3) {
			case 0:
				b[i] = alphabet[r.IntN(len(alphabet))]
			case 1:
				b = append(b[:i], b[i+1:]...)
			default:
				b = append(b[:i], append([]byte{alphabet[r.IntN(len(alphabet))]}, b[i:]...)...)
			}
			if len(b) == 0 {
				b = []byte("{")
			}
		}
		if utf8.Valid(b) { // readBody refuses the rest first
			checkDecodeConversion(t, string(b))
		}
	}
}
