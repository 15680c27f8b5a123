// Package money writes and reads amounts of money, kept everywhere else as
// integer minor units of an ISO 4217 currency.
package money

import "strconv"

// Major writes minor units as a decimal amount in the currency's
// major unit: 300 USD cents is "3.00", 300 JPY is "300".
func Major(minor int64, currency string) string {
	if minor < 0 {
		return "-" + Major(-minor, currency) // a clawback
	}
	exp := Exponent(currency)
	if exp == 0 {
		return strconv.FormatInt(minor, 10)
	}
	s := strconv.FormatInt(minor, 10)
	for len(s) <= exp {
		s = "0" + s
	}
	return s[:len(s)-exp] + "." + s[len(s)-exp:]
}

// Exponent is ISO 4217's number of decimals of a currency: 2
// unless listed.
func Exponent(currency string) int {
	switch currency {
	case "BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "VND", "VUV", "XAF", "XOF", "XPF":
		return 0
	case "BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND":
		return 3
	}
	return 2
}
