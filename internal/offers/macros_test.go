package offers

import (
	"testing"

	"github.com/tally-hq/tally"
)

func TestFillMacros(t *testing.T) {
	c := tally.Click{ID: "clk_1", OfferID: "off_2", PartnerID: "prt_3", Sub1: "a b&c", Sub2: "é", Sub5: "x/y"}
	for dest, want := range map[string]string{
		"https://shop.example/":                         "https://shop.example/",
		"https://s.example/?c={click_id}":               "https://s.example/?c=clk_1",
		"https://s.example/{offer_id}/{partner_id}":     "https://s.example/off_2/prt_3",
		"https://s.example/?s={sub1}&t={sub1}":          "https://s.example/?s=a+b%26c&t=a+b%26c",
		"https://s.example/?a={sub2}&b={sub3}&e={sub5}": "https://s.example/?a=%C3%A9&b=&e=x%2Fy",
		"https://s.example/?k={keep}&c={click_id}":      "https://s.example/?k={keep}&c=clk_1",
		"https://s.example/?x={a{click_id}":             "https://s.example/?x={aclk_1",
		"https://s.example/?x=}{click_id}{":             "https://s.example/?x=}clk_1{",
		"https://s.example/?c={click_id":                "https://s.example/?c={click_id",
		"https://s.example/?c={}":                       "https://s.example/?c={}",
	} {
		if got := FillMacros(dest, c); got != want {
			t.Errorf("fillMacros(%q) = %q, want %q", dest, got, want)
		}
	}
}
