package cli_test

import (
	"strings"
	"testing"
)

// `tally users create` reads the password from standard input and works
// with and without a running server.
func TestUsersCreate(t *testing.T) {
	t.Parallel()
	environ := env()
	data := t.TempDir()
	brandID := str(tallyOK(t, environ, "brands", "create", "--name", "Acme", "--data", data), "id")

	const pw = "a long passphrase, 2 commas"
	r := tallyStdin(t, environ, pw+"\n", "users", "create", "--brand", brandID, "--email", "Owner@Acme.example", "--data", data)
	if r.code != 0 {
		t.Fatalf("users create failed:\n%s", r)
	}
	u := oneObject(t, r.stdout)
	if !strings.HasPrefix(str(u, "id"), "usr_") || str(u, "brandId") != brandID || str(u, "email") != "owner@acme.example" || str(u, "role") != "owner" {
		t.Errorf("users create printed %v", u)
	}
	if strings.Contains(r.stdout, "passphrase") || strings.Contains(r.stdout, "argon2") {
		t.Errorf("users create shows the password or its hash: %s", r.stdout)
	}

	tallyFails(t, environ, []string{"users", "create", "--brand", brandID, "--email", "owner@acme.example", "--data", data}, "no password")
	r = tallyStdin(t, environ, pw+"\n", "users", "create", "--brand", brandID, "--email", "OWNER@acme.example", "--data", data)
	if r.code == 0 || !strings.Contains(r.stderr, "exists") {
		t.Errorf("a second user with the address:\n%s", r)
	}
	r = tallyStdin(t, environ, "short\n", "users", "create", "--brand", brandID, "--email", "b@acme.example", "--data", data)
	if r.code == 0 || !strings.Contains(r.stderr, "at least 12 characters") {
		t.Errorf("a short password:\n%s", r)
	}
	tallyFails(t, environ, []string{"users", "create", "--email", "c@acme.example", "--data", data}, "--brand")

	// While the server holds the store, the command goes through it.
	s := serve(t, environ, "--data", data)
	r = tallyStdin(t, environ, "another long passphrase\r\n", "users", "create", "--brand", brandID, "--email", "ops@acme.example", "--data", data)
	if r.code != 0 || str(oneObject(t, r.stdout), "email") != "ops@acme.example" {
		t.Fatalf("users create through the server:\n%s", r)
	}
	s.waitLog(t, "the users create request", requestLogged("POST", "/_admin/users", 201))
}

// `tally users reset` prints a password reset link, once, for a user of
// any brand; an unknown address fails.
func TestUsersReset(t *testing.T) {
	t.Parallel()
	environ := env()
	data := t.TempDir()
	brandID := str(tallyOK(t, environ, "brands", "create", "--name", "Acme", "--data", data), "id")
	if r := tallyStdin(t, environ, "a long passphrase, 2 commas\n", "users", "create", "--brand", brandID, "--email", "owner@acme.example", "--data", data); r.code != 0 {
		t.Fatalf("users create failed:\n%s", r)
	}
	reset := tallyOK(t, environ, "users", "reset", "--email", "Owner@acme.example", "--url", "https://tally.example/", "--data", data)
	link := str(reset, "resetUrl")
	if !strings.HasPrefix(link, "https://tally.example/dashboard/reset/") || len(link) < len("https://tally.example/dashboard/reset/")+40 ||
		str(reset, "email") != "owner@acme.example" || str(reset, "expiresAt") == "" {
		t.Errorf("users reset printed %v", reset)
	}
	if again := str(tallyOK(t, environ, "users", "reset", "--email", "owner@acme.example", "--data", data), "resetUrl"); again == link ||
		!strings.HasPrefix(again, "http://127.0.0.1:8080/dashboard/reset/") {
		t.Errorf("a second reset link %q (the first %q)", again, link)
	}
	tallyFails(t, environ, []string{"users", "reset", "--email", "nobody@acme.example", "--data", data}, "No user")
	tallyFails(t, environ, []string{"users", "reset", "--data", data}, "--email")
}
