package password

import (
	"encoding/base64"
	"strings"
	"testing"

	"golang.org/x/crypto/argon2"
)

func TestHashAndVerify(t *testing.T) {
	h, err := Hash("correct horse battery staple")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Errorf("hash %q is not an Argon2id PHC string with the chosen parameters", h)
	}
	if strings.Contains(h, "horse") {
		t.Error("the hash contains the password")
	}
	for pw, want := range map[string]bool{
		"correct horse battery staple":  true,
		"correct horse battery staple ": false,
		"Correct horse battery staple":  false,
		"":                              false,
	} {
		if ok, err := Verify(h, pw); err != nil || ok != want {
			t.Errorf("Verify(%q) = %v, %v; want %v", pw, ok, err, want)
		}
	}
	// The same password hashes differently each time (a fresh salt).
	if h2, _ := Hash("correct horse battery staple"); h2 == h {
		t.Error("two hashes of one password are equal: no salt")
	}
}

// A hash made with other parameters (an older, cheaper setting) still
// verifies: Verify reads them from the hash.
func TestVerifyReadsParametersFromTheHash(t *testing.T) {
	salt := []byte("somesalt16bytes!")
	sum := argon2.IDKey([]byte("pw"), salt, 1, 64, 1, 32)
	b64 := base64.RawStdEncoding
	old := "$argon2id$v=19$m=64,t=1,p=1$" + b64.EncodeToString(salt) + "$" + b64.EncodeToString(sum)
	if ok, err := Verify(old, "pw"); !ok || err != nil {
		t.Errorf("Verify(a hash with m=64,t=1) = %v, %v; want true", ok, err)
	}
	if ok, _ := Verify(old, "pw2"); ok {
		t.Error("a wrong password verifies against an old hash")
	}
	for _, bad := range []string{"", "plain", "$argon2id$v=19$m=64,t=1,p=1$c29tZXNhbHQ$",
		"$bcrypt$v=19$m=64,t=1,p=1$c29tZXNhbHQ$AAAA", "$argon2id$v=18$m=64,t=1,p=1$c29tZXNhbHQ$AAAA",
		"$argon2id$v=19$m=0,t=1,p=1$c29tZXNhbHQ$AAAA", "$argon2id$v=19$m=64,t=1,p=1$!!$AAAA"} {
		if ok, err := Verify(bad, "pw"); ok || err == nil {
			t.Errorf("Verify(%q) = %v, %v; want a malformed-hash error", bad, ok, err)
		}
	}
}

// BenchmarkHash measures what one sign-in costs in CPU (Verify is the same
// work) with the parameters of new hashes.
func BenchmarkHash(b *testing.B) {
	for b.Loop() {
		if _, err := Hash("correct horse battery staple"); err != nil {
			b.Fatal(err)
		}
	}
}
