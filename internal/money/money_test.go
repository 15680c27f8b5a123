package money

import "testing"

func TestMajorUnitsFollowTheCurrencysDecimals(t *testing.T) {
	for _, c := range []struct {
		cents    int64
		currency string
		want     string
	}{
		{300, "USD", "3.00"}, {5, "EUR", "0.05"}, {0, "USD", "0.00"}, {123456789, "GBP", "1234567.89"},
		{300, "JPY", "300"}, {0, "KRW", "0"}, {1500, "BHD", "1.500"}, {7, "KWD", "0.007"},
	} {
		if got := Major(c.cents, c.currency); got != c.want {
			t.Errorf("Major(%d, %s) = %q, want %q", c.cents, c.currency, got, c.want)
		}
	}
}
