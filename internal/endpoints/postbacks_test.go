package endpoints

import (
	"net/url"
	"testing"
)

// A value is escaped once and never read as a macro itself, wherever the
// macro stands.
func TestFillPostbackEscapesEveryValue(t *testing.T) {
	v := PostbackValues{ConversionID: "cnv_1", Subs: [5]string{"a b&c=d", "{sub1}", "ü/?#%", "", "x"}}
	got := FillPostback("https://p.example/{sub3}/pb?a={sub1}&b={sub2}&c={sub4}{sub5}&e={event}", "conversion.created", v)
	u, err := url.Parse(got)
	if err != nil {
		t.Fatalf("%q: %v", got, err)
	}
	q := u.Query()
	if q.Get("a") != "a b&c=d" || q.Get("b") != "{sub1}" || q.Get("c") != "x" || q.Get("e") != "conversion.created" || len(q) != 4 {
		t.Errorf("query of %q = %v", got, q)
	}
	if u.Path != "/ü/?#%/pb" {
		t.Errorf("path of %q = %q", got, u.Path)
	}
	for _, tmpl := range []string{"https://p.example/pb?x={revenue}", "https://p.example/pb?x={sub6}", "https://p.example/pb?x={", "https://p.example/pb?x=}",
		"https://{sub1}.example/pb", "https://p.example:{sub1}/pb", "{sub1}://p.example/pb"} {
		if err := checkPostbackTemplate(tmpl); err == nil {
			t.Errorf("%q passes", tmpl)
		}
	}
	if err := checkPostbackTemplate("https://p.example/{sub1}/pb?c={click_id}#{event}"); err != nil {
		t.Errorf("a template with macros in the path, query and fragment: %v", err)
	}
}
