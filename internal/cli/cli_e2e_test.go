package cli_test

// End-to-end tests of the real tally binary: TestMain builds it once, and
// every test runs it with exec.Command, as a user would, each in its own data
// folder and (for the server) on its own port. They use only the standard
// library and the embedded store.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/dynamotest"
	"github.com/tally-hq/tally/internal/reporoot"
	"github.com/tally-hq/tally/internal/testenv"
)

// tallyBin is the binary built by TestMain.
var tallyBin string

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	root, err := reporoot.Find()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "tally-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	tallyBin = filepath.Join(dir, "tally")
	build := exec.Command("go", "build", "-o", tallyBin, "./cmd/tally")
	build.Dir = root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: go build ./cmd/tally:", err)
		return 1
	}
	return dynamotest.Run(m)
}

// env is the test process's environment without any TALLY_ variable (so
// that, say, a TALLY_TABLE set for other tests cannot point the binary at
// DynamoDB), plus extra.
func env(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TALLY_") {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}

// ---------------------------------------------------------------------------
// Running admin commands

type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout: %q\nstderr: %q", r.code, r.stdout, r.stderr)
}

// tally runs the binary with args in a fresh working directory (so that the
// default ./.tally is never shared) and returns what it printed.
func tally(t *testing.T, environ []string, args ...string) result {
	t.Helper()
	return tallyStdin(t, environ, "", args...)
}

// tallyStdin is tally with stdin as the command's standard input.
func tallyStdin(t *testing.T, environ []string, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, tallyBin, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = environ
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		t.Fatalf("tally %s: %v", strings.Join(args, " "), err)
	}
	if ctx.Err() != nil {
		t.Fatalf("tally %s did not finish within a minute", strings.Join(args, " "))
	}
	return r
}

// tallyOK runs a command that must succeed, print exactly one JSON object on
// stdout and nothing on stderr, and returns the object.
func tallyOK(t *testing.T, environ []string, args ...string) map[string]any {
	t.Helper()
	r := tally(t, environ, args...)
	if r.code != 0 {
		t.Fatalf("tally %s failed:\n%s", strings.Join(args, " "), r)
	}
	if r.stderr != "" {
		t.Errorf("tally %s succeeded but wrote to stderr: %q", strings.Join(args, " "), r.stderr)
	}
	return oneObject(t, r.stdout)
}

// tallyFails runs a command that must fail: non-zero exit, nothing on
// stdout, and a message on stderr that contains every one of want.
func tallyFails(t *testing.T, environ []string, args []string, want ...string) {
	t.Helper()
	r := tally(t, environ, args...)
	line := "tally " + strings.Join(args, " ")
	if r.code == 0 {
		t.Errorf("%s: exit 0, want a failure\n%s", line, r)
	}
	if r.stdout != "" {
		t.Errorf("%s: printed %q on stdout; a failure must print nothing there", line, r.stdout)
	}
	if strings.TrimSpace(r.stderr) == "" {
		t.Errorf("%s: failed without a message on stderr", line)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("%s: stderr %q does not mention %q", line, r.stderr, w)
		}
	}
	if strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr, "panic:") {
		t.Errorf("%s: crashed:\n%s", line, r.stderr)
	}
}

// oneObject decodes out, which must hold exactly one JSON object.
func oneObject(t *testing.T, out string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	var v map[string]any
	if err := dec.Decode(&v); err != nil || v == nil {
		t.Fatalf("output is not a JSON object (%v): %q", err, out)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("output holds more than one JSON object: %q", out)
	}
	return v
}

func str(v map[string]any, field string) string {
	s, _ := v[field].(string)
	return s
}

func hashOf(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// setupBrand creates a brand and an API key in dataDir with the admin
// commands and returns the brand id, the key id and the secret.
func setupBrand(t *testing.T, environ []string, dataDir, name string) (brandID, keyID, secret string) {
	t.Helper()
	brand := tallyOK(t, environ, "brands", "create", "--name", name, "--data", dataDir)
	brandID = str(brand, "id")
	if !strings.HasPrefix(brandID, "brd_") {
		t.Fatalf("brands create: id %q does not start with brd_: %v", brandID, brand)
	}
	key := tallyOK(t, environ, "keys", "create", "--brand", brandID, "--data", dataDir)
	keyID, secret = str(key, "id"), str(key, "key")
	if !strings.HasPrefix(keyID, "key_") || !strings.HasPrefix(secret, "tally_sk_") {
		t.Fatalf("keys create: want id key_… and key tally_sk_…, got %v", key)
	}
	return brandID, keyID, secret
}

// ---------------------------------------------------------------------------
// Running the server

type server struct {
	cmd            *exec.Cmd
	addr           string // host:port
	stdout, stderr *testenv.SyncBuffer
	done           chan struct{} // closed when the process has exited
	waitErr        error         // valid once done is closed
}

// freePort returns a loopback port that nothing listened on a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// serve starts `tally serve --addr 127.0.0.1:<free port> args...` and waits
// until it answers HTTP. The process is killed when the test ends, unless it
// has exited by then.
func serve(t *testing.T, environ []string, args ...string) *server {
	t.Helper()
	return serveThrough(t, environ, nil, args...)
}

// serveThrough is serve with the server started through the command
// launcher (say sh -c 'ulimit …; exec "$@"' sh); nil starts it directly.
func serveThrough(t *testing.T, environ, launcher []string, args ...string) *server {
	t.Helper()
	for attempt := 1; ; attempt++ {
		s := startServerThrough(t, environ, launcher, args...)
		err := s.waitReady(15 * time.Second)
		if err == nil {
			return s
		}
		// Another process may have taken the free port in between.
		if attempt < 3 && strings.Contains(s.stderr.String(), "address already in use") {
			continue
		}
		t.Fatalf("server did not come up: %v\nstderr:\n%s", err, s.stderr)
	}
}

func startServer(t *testing.T, environ []string, args ...string) *server {
	t.Helper()
	return startServerThrough(t, environ, nil, args...)
}

func startServerThrough(t *testing.T, environ, launcher []string, args ...string) *server {
	t.Helper()
	s := &server{
		addr:   fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		stdout: &testenv.SyncBuffer{},
		stderr: &testenv.SyncBuffer{},
		done:   make(chan struct{}),
	}
	argv := append(append(slices.Clone(launcher), tallyBin, "serve", "--addr", s.addr), args...)
	s.cmd = exec.Command(argv[0], argv[1:]...)
	s.cmd.Dir = t.TempDir()
	s.cmd.Env = environ
	s.cmd.Stdout, s.cmd.Stderr = s.stdout, s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		select {
		case <-s.done:
		default:
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	})
	return s
}

// waitReady polls the server until it answers any HTTP request.
func (s *server) waitReady(limit time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(limit)
	for {
		select {
		case <-s.done:
			return fmt.Errorf("the server exited: %v", s.waitErr)
		default:
		}
		resp, err := client.Get("http://" + s.addr + "/")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer within %v: %v", limit, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exited waits for the process to end and returns its exit code (-1 when a
// signal killed it).
func (s *server) exited(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(limit):
		t.Fatalf("the server did not exit within %v\nstderr:\n%s", limit, s.stderr)
	}
	var exit *exec.ExitError
	switch {
	case s.waitErr == nil:
		return 0
	case errors.As(s.waitErr, &exit):
		return exit.ExitCode()
	}
	t.Fatalf("wait for the server: %v", s.waitErr)
	return 0
}

// stop sends SIGTERM and expects a clean exit.
func (s *server) stop(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := s.exited(t, 15*time.Second); code != 0 {
		t.Fatalf("after SIGTERM the server exited with %d, want 0\nstderr:\n%s", code, s.stderr)
	}
}

var httpClient = &http.Client{Timeout: 15 * time.Second}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) object(t *testing.T) map[string]any {
	t.Helper()
	return oneObject(t, string(r.body))
}

// call sends one API request with the API key (none when empty) and a JSON
// body (none when nil).
func (s *server) call(t *testing.T, method, path, key string, body any) response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, "http://"+s.addr+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read the answer: %v", method, path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: raw}
}

// expect fails the test unless the answer has the status.
func (r response) expect(t *testing.T, what string, status int) response {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: status %d, want %d; body %s", what, r.status, status, r.body)
	}
	return r
}

// logLines parses the server's stderr, failing the test for any line that is
// not a JSON object.
func (s *server) logLines(t *testing.T) []map[string]any {
	t.Helper()
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s.stderr.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var v map[string]any
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil || v == nil {
			t.Errorf("server log line is not a JSON object: %q", sc.Text())
			continue
		}
		lines = append(lines, v)
	}
	return lines
}

// waitLog polls the server's log until a line satisfies match.
func (s *server) waitLog(t *testing.T, what string, match func(map[string]any) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, l := range s.logLines(t) {
			if match(l) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server never logged %s\nstderr:\n%s", what, s.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func requestLogged(method, path string, status int) func(map[string]any) bool {
	return func(l map[string]any) bool {
		st, _ := l["status"].(float64)
		return l["msg"] == "request" && l["method"] == method && l["path"] == path && int(st) == status
	}
}

func offerInput(name string) map[string]any {
	return map[string]any{
		"name":           name,
		"destinationUrl": "https://shop.example.com/landing",
		"revenueCents":   5000,
		"payoutCents":    1200,
		"currency":       "USD",
	}
}

// ---------------------------------------------------------------------------
// 1. Admin commands with no server running

func TestAdminCommandsWithoutServer(t *testing.T) {
	t.Parallel()
	environ := env()
	data := t.TempDir()

	brand := tallyOK(t, environ, "brands", "create", "--name", "Acme", "--data", data)
	brandID := str(brand, "id")
	if !strings.HasPrefix(brandID, "brd_") || str(brand, "name") != "Acme" {
		t.Fatalf("brands create printed %v; want an id brd_… and the name Acme", brand)
	}

	key := tallyOK(t, environ, "keys", "create", "--brand", brandID, "--data", data)
	keyID, secret := str(key, "id"), str(key, "key")
	if !strings.HasPrefix(keyID, "key_") {
		t.Errorf("keys create: id %q does not start with key_", keyID)
	}
	if str(key, "brandId") != brandID {
		t.Errorf("keys create: brandId %q, want %q", str(key, "brandId"), brandID)
	}
	if !strings.HasPrefix(secret, "tally_sk_") || len(secret) <= len("tally_sk_") {
		t.Fatalf("keys create: key %q is not a tally_sk_… secret", secret)
	}
	if p := str(key, "prefix"); p != "" && !strings.HasPrefix(secret, p) {
		t.Errorf("keys create: prefix %q does not start the secret", p)
	}

	r := tally(t, environ, "keys", "list", "--brand", brandID, "--data", data)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("keys list failed:\n%s", r)
	}
	var list struct {
		Data []map[string]any `json:"data"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("keys list printed %q: %v", r.stdout, err)
	}
	oneObject(t, r.stdout)
	if len(list.Data) != 1 || str(list.Data[0], "id") != keyID || str(list.Data[0], "brandId") != brandID {
		t.Fatalf("keys list printed %s; want exactly the key %s", r.stdout, keyID)
	}
	if list.Data[0]["revokedAt"] != nil {
		t.Errorf("keys list: a fresh key shows revokedAt %v", list.Data[0]["revokedAt"])
	}
	if strings.Contains(r.stdout, secret) {
		t.Errorf("keys list shows the secret: %s", r.stdout)
	}
	if strings.Contains(r.stdout, hashOf(secret)) {
		t.Errorf("keys list shows the secret's hash: %s", r.stdout)
	}
	for _, field := range []string{"key", "hash", "secret"} {
		if _, ok := list.Data[0][field]; ok {
			t.Errorf("keys list: the key has a %q field: %s", field, r.stdout)
		}
	}

	revoked := tallyOK(t, environ, "keys", "revoke", "--data", data, keyID)
	if str(revoked, "id") != keyID {
		t.Errorf("keys revoke printed the key %q, want %q", str(revoked, "id"), keyID)
	}
	if at, err := time.Parse(time.RFC3339, str(revoked, "revokedAt")); err != nil || at.IsZero() {
		t.Errorf("keys revoke: revokedAt is %v, want a time", revoked["revokedAt"])
	}
	if _, ok := revoked["key"]; ok || strings.Contains(fmt.Sprint(revoked), secret) {
		t.Errorf("keys revoke shows the secret: %v", revoked)
	}
	after := tallyOK(t, environ, "keys", "list", "--brand", brandID, "--data", data)
	if items, _ := after["data"].([]any); len(items) != 1 || items[0].(map[string]any)["revokedAt"] == nil {
		t.Errorf("keys list after revoke: %v; want the key with revokedAt set", after)
	}

	// The usage text documents `tally keys revoke KEY_ID [--data DIR]`: the
	// flag after the key id must work as well as before it.
	t.Run("revoke as documented", func(t *testing.T) {
		key := tallyOK(t, environ, "keys", "create", "--brand", brandID, "--data", data)
		r := tally(t, environ, "keys", "revoke", str(key, "id"), "--data", data)
		if r.code != 0 {
			t.Fatalf("tally keys revoke KEY_ID --data DIR, the form the usage text shows, failed:\n%s", r)
		}
		if got := oneObject(t, r.stdout); str(got, "id") != str(key, "id") || got["revokedAt"] == nil {
			t.Errorf("keys revoke printed %v; want the key with revokedAt set", got)
		}
	})

	t.Run("bad usage", func(t *testing.T) {
		tallyFails(t, environ, []string{"frobnicate"}, "Usage")
		tallyFails(t, environ, []string{"brands", "delete", "--data", data}, "Usage")
		tallyFails(t, environ, []string{"keys", "create", "--data", data}, "--brand")
		tallyFails(t, environ, []string{"keys", "list", "--data", data}, "--brand")
		tallyFails(t, environ, []string{"keys", "create", "--brand", "brd_doesnotexist", "--data", data}, "brd_doesnotexist")
		tallyFails(t, environ, []string{"keys", "revoke", "--data", data}, "key id")
		tallyFails(t, environ, []string{"keys", "revoke", "--data", data, "key_doesnotexist"}, "key_doesnotexist")
		tallyFails(t, environ, []string{"brands", "create", "--data", data}, "name")
		tallyFails(t, environ, []string{"brands", "create", "--name", "X", "--colour", "red", "--data", data}, "colour")
	})
}

// Help that is asked for (tally help, -h, --help, a command's -h) is
// printed on stdout with exit status 0 and runs nothing; a command line
// that cannot run as written exits 2 with the problem on stderr; a command
// that runs and fails exits 1.
func TestHelpExitsZeroAndMisuseTwo(t *testing.T) {
	t.Parallel()
	environ := env()
	data := t.TempDir()
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"keys", "-h"}} {
		r := tally(t, environ, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Usage:") || !strings.Contains(r.stdout, "tally keys create") || r.stderr != "" {
			t.Errorf("tally %s: want the usage on stdout and exit 0\n%s", strings.Join(args, " "), r)
		}
	}
	for _, c := range []struct {
		args []string
		want string // in the command's help
	}{
		{[]string{"serve", "-h"}, "-addr"},
		{[]string{"listen", "--help"}, "-secret"},
		{[]string{"brands", "create", "-h", "--data", data}, "tally brands create --name NAME"},
		{[]string{"keys", "create", "--brand", "brd_x", "--data", data, "-h"}, "-brand"},
		{[]string{"keys", "revoke", "key_x", "-h", "--data", data}, "tally keys revoke KEY_ID"},
		{[]string{"users", "create", "-h"}, "-email"},
		{[]string{"users", "reset", "-h"}, "tally users reset --email EMAIL"},
		{[]string{"table", "create", "-h"}, "tally table create"},
	} {
		r := tally(t, environ, c.args...)
		if r.code != 0 || !strings.Contains(r.stdout, c.want) || r.stderr != "" {
			t.Errorf("tally %s: want help naming %q on stdout and exit 0\n%s", strings.Join(c.args, " "), c.want, r)
		}
	}
	if entries, err := os.ReadDir(data); err != nil || len(entries) != 0 {
		t.Errorf("asking for help touched the data folder: %v %v", entries, err)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "Usage:"},
		{[]string{"frobnicate"}, "Usage:"},
		{[]string{"keys"}, "Usage:"},
		{[]string{"brands", "create", "--data", data}, "--name"},
		{[]string{"brands", "create", "--name", "A", "--colour", "red", "--data", data}, "colour"},
		{[]string{"brands", "create", "--name", "A", "extra", "--data", data}, "extra"},
		{[]string{"keys", "revoke", "--data", data}, "key id"},
		{[]string{"listen", "--status", "99"}, "99"},
		{[]string{"serve", "now"}, "now"},
	} {
		r := tally(t, environ, c.args...)
		if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, c.want) {
			t.Errorf("tally %s: want exit 2 and %q on stderr\n%s", strings.Join(c.args, " "), c.want, r)
		}
	}
	if r := tally(t, environ, "keys", "create", "--brand", "brd_doesnotexist", "--data", data); r.code != 1 || !strings.Contains(r.stderr, "brd_doesnotexist") {
		t.Errorf("keys create for no such brand: want exit 1, a failure rather than misuse\n%s", r)
	}
}

// ---------------------------------------------------------------------------
// 2. Admin commands through a running server

func TestAdminCommandsThroughServer(t *testing.T) {
	t.Parallel()
	environ := env()
	data := t.TempDir()
	s := serve(t, environ, "--data", data)

	brand := tallyOK(t, environ, "brands", "create", "--name", "Acme", "--data", data)
	brandID := str(brand, "id")
	if !strings.HasPrefix(brandID, "brd_") {
		t.Fatalf("brands create printed %v", brand)
	}
	// The server holds the store, so the command must have gone through it.
	s.waitLog(t, "the brands create request", requestLogged("POST", "/_admin/brands", 201))

	key := tallyOK(t, environ, "keys", "create", "--brand", brandID, "--data", data)
	keyID, secret := str(key, "id"), str(key, "key")
	if !strings.HasPrefix(keyID, "key_") || str(key, "brandId") != brandID || !strings.HasPrefix(secret, "tally_sk_") {
		t.Fatalf("keys create printed %v", key)
	}
	s.waitLog(t, "the keys create request", requestLogged("POST", "/_admin/keys", 201))

	r := tally(t, environ, "keys", "list", "--brand", brandID, "--data", data)
	if r.code != 0 {
		t.Fatalf("keys list failed:\n%s", r)
	}
	list := oneObject(t, r.stdout)
	items, _ := list["data"].([]any)
	if len(items) != 1 || str(items[0].(map[string]any), "id") != keyID {
		t.Errorf("keys list printed %s; want exactly the key %s", r.stdout, keyID)
	}
	if strings.Contains(r.stdout, secret) || strings.Contains(r.stdout, hashOf(secret)) {
		t.Errorf("keys list shows the secret or its hash: %s", r.stdout)
	}
	s.waitLog(t, "the keys list request", requestLogged("GET", "/_admin/keys", 200))

	// The new key works against the server.
	s.call(t, "GET", "/api/v1/offers", secret, nil).expect(t, "GET /api/v1/offers with the new key", 200)

	revoked := tallyOK(t, environ, "keys", "revoke", "--data", data, keyID)
	if str(revoked, "id") != keyID || revoked["revokedAt"] == nil {
		t.Errorf("keys revoke printed %v; want the key with revokedAt set", revoked)
	}
	s.waitLog(t, "the keys revoke request", requestLogged("POST", "/_admin/keys/"+keyID+"/revoke", 200))

	// The key was revoked through this very server, so this server must
	// refuse it from the next request on; only other instances may trust
	// their cache for up to its TTL (30 s). Poll up to 35 s so that a stale
	// cache shows up as a precise failure rather than a timeout.
	start := time.Now()
	var resp response
	for attempt := 0; ; attempt++ {
		resp = s.call(t, "GET", "/api/v1/offers", secret, nil)
		if resp.status == 401 {
			if attempt > 0 {
				t.Errorf("the server that revoked the key kept accepting it for %v (%d requests); it should refuse it at once",
					time.Since(start).Round(time.Second), attempt)
			}
			break
		}
		if resp.status != 200 {
			t.Fatalf("GET /api/v1/offers with the revoked key: status %d: %s", resp.status, resp.body)
		}
		if time.Since(start) > 35*time.Second {
			t.Fatalf("the revoked key is still accepted after %v", time.Since(start).Round(time.Second))
		}
		time.Sleep(250 * time.Millisecond)
	}
	var e struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(resp.body, &e); err != nil || e.Error.Code != "unauthorized" || e.Error.Message == "" {
		t.Errorf("401 body %s; want {\"error\":{\"code\":\"unauthorized\",\"message\":…}}", resp.body)
	}
}

// ---------------------------------------------------------------------------
// 3. Data survives a restart

func TestDataSurvivesRestart(t *testing.T) {
	t.Parallel()
	environ := env()
	data := t.TempDir()
	_, _, secret := setupBrand(t, environ, data, "Acme")

	s := serve(t, environ, "--data", data)
	created := s.call(t, "POST", "/api/v1/offers", secret, offerInput("Spring sale")).expect(t, "POST /api/v1/offers", 201).object(t)
	offerID := str(created, "id")
	if !strings.HasPrefix(offerID, "off_") {
		t.Fatalf("POST /api/v1/offers answered %v", created)
	}
	s.stop(t)

	s = serve(t, environ, "--data", data)
	got := s.call(t, "GET", "/api/v1/offers/"+offerID, secret, nil).expect(t, "GET the offer after a restart", 200).object(t)
	if !reflect.DeepEqual(got, created) {
		t.Errorf("after a restart the offer is\n%v\nwant\n%v", got, created)
	}
	list := s.call(t, "GET", "/api/v1/offers", secret, nil).expect(t, "GET /api/v1/offers after a restart", 200).object(t)
	if items, _ := list["data"].([]any); len(items) != 1 || !reflect.DeepEqual(items[0], created) {
		t.Errorf("after a restart the offers are %v; want just %v", list, created)
	}
	s.stop(t)
}

// ---------------------------------------------------------------------------
// 4. Graceful shutdown under load

func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	environ := env("TALLY_RATE_LIMIT=1000000")
	data := t.TempDir()
	brandID, _, secret := setupBrand(t, environ, data, "Acme")

	s := serve(t, environ, "--data", data)
	offer := s.call(t, "POST", "/api/v1/offers", secret, offerInput("Load")).expect(t, "POST /api/v1/offers", 201).object(t)
	offerID := str(offer, "id")
	partner := s.call(t, "POST", "/api/public/brands/"+brandID+"/applications", "",
		map[string]any{"name": "Pat Partner", "email": "pat@example.com"}).expect(t, "apply as a partner", 201).object(t)
	partnerID := str(partner, "id")
	approved := s.call(t, "POST", "/api/v1/partners/"+partnerID+"/approve", secret, nil).expect(t, "approve the partner", 200).object(t)
	if str(approved, "status") != "active" {
		t.Fatalf("approved partner: %v", approved)
	}

	const workers = 16
	const perWorker = 2000 // a bound in case the server never stops
	var (
		mu         sync.Mutex
		createdIDs []string
		unexpected []string
		failures   []string
		wg         sync.WaitGroup
	)
	enough := make(chan struct{})
	var enoughOnce sync.Once
	client := &http.Client{
		Timeout:   20 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: workers, DisableCompression: true},
	}
	post := func(w, i int) (int, []byte, error) {
		body, _ := json.Marshal(map[string]any{
			"offerId": offerID, "partnerId": partnerID, "externalTxnId": fmt.Sprintf("w%d-%d", w, i),
		})
		req, _ := http.NewRequest("POST", "http://"+s.addr+"/api/v1/conversions", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		return resp.StatusCode, raw, err
	}
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				status, body, err := post(w, i)
				mu.Lock()
				switch {
				case err != nil:
					failures = append(failures, err.Error())
				case status == 201:
					var c struct{ ID string }
					_ = json.Unmarshal(body, &c)
					createdIDs = append(createdIDs, c.ID)
					if len(createdIDs) >= 40 {
						enoughOnce.Do(func() { close(enough) })
					}
				default:
					unexpected = append(unexpected, fmt.Sprintf("%d %s", status, body))
				}
				mu.Unlock()
				if err != nil || status != 201 {
					return
				}
			}
		})
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()

	select {
	case <-enough:
	case <-allDone:
		t.Fatalf("the workers stopped before SIGTERM: unexpected %v, failures %v", unexpected, failures)
	case <-time.After(20 * time.Second):
		t.Fatal("fewer than 40 conversions recorded in 20 s")
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := s.exited(t, 10*time.Second); code != 0 {
		t.Errorf("after SIGTERM under load the server exited with %d, want 0\nstderr:\n%s", code, s.stderr)
	}
	select {
	case <-allDone:
	case <-time.After(30 * time.Second):
		t.Fatal("requests still running 30 s after the server exited")
	}

	mu.Lock()
	ids := append([]string(nil), createdIDs...)
	mu.Unlock()
	t.Logf("%d conversions created, %d requests failed to reach the server", len(ids), len(failures))
	for _, u := range unexpected {
		t.Errorf("a request got neither 201 nor a connection error: %s", u)
	}
	if len(failures) == 0 && len(ids) < workers*perWorker {
		t.Errorf("no request failed although the server stopped")
	}

	if _, err := os.Stat(filepath.Join(data, "server.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("server.json is still there after a clean shutdown (stat: %v)", err)
	}
	stoppedCleanly := false
	for _, l := range s.logLines(t) {
		stoppedCleanly = stoppedCleanly || l["msg"] == "stopped cleanly"
	}
	if !stoppedCleanly {
		t.Errorf("the log does not say \"stopped cleanly\":\n%s", s.stderr)
	}

	// After a restart, exactly the conversions that got a 201 are there.
	s = serve(t, environ, "--data", data)
	listed := map[string]bool{}
	cursor := ""
	for page := 0; ; page++ {
		path := "/api/v1/conversions?limit=100"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		var body struct {
			Data       []struct{ ID string }
			NextCursor *string
		}
		r := s.call(t, "GET", path, secret, nil).expect(t, "list conversions after the restart", 200)
		if err := json.Unmarshal(r.body, &body); err != nil {
			t.Fatal(err)
		}
		for _, c := range body.Data {
			if listed[c.ID] {
				t.Errorf("conversion %s listed twice", c.ID)
			}
			listed[c.ID] = true
		}
		if body.NextCursor == nil || page > 100 {
			break
		}
		cursor = *body.NextCursor
	}
	if len(listed) != len(ids) {
		t.Errorf("after the restart %d conversions are listed, but %d requests got a 201", len(listed), len(ids))
	}
	for _, id := range ids {
		if !listed[id] {
			t.Errorf("conversion %s got a 201 but is not listed after the restart", id)
		}
		s.call(t, "GET", "/api/v1/conversions/"+id, secret, nil).expect(t, "GET conversion "+id+" after the restart", 200)
	}
	s.stop(t)
}

// ---------------------------------------------------------------------------
// 5. kill -9

func TestKilledServer(t *testing.T) {
	t.Parallel()
	environ := env()
	data := t.TempDir()
	s := serve(t, environ, "--data", data)
	brandID, keyID, secret := setupBrand(t, environ, data, "Acme") // through the server
	offer := s.call(t, "POST", "/api/v1/offers", secret, offerInput("Before the crash")).expect(t, "POST /api/v1/offers", 201).object(t)

	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s.exited(t, 10*time.Second)
	if _, err := os.Stat(filepath.Join(data, "server.json")); err != nil {
		t.Fatalf("expected the killed server to leave server.json behind (the case under test): %v", err)
	}

	// The lock died with the process: the commands open the store themselves.
	list := tallyOK(t, environ, "keys", "list", "--brand", brandID, "--data", data)
	if items, _ := list["data"].([]any); len(items) != 1 || str(items[0].(map[string]any), "id") != keyID {
		t.Errorf("keys list after kill -9: %v; want the key %s made before the kill", list, keyID)
	}
	key2 := tallyOK(t, environ, "keys", "create", "--brand", brandID, "--data", data)
	if !strings.HasPrefix(str(key2, "key"), "tally_sk_") {
		t.Errorf("keys create after kill -9 printed %v", key2)
	}
	other := tallyOK(t, environ, "brands", "create", "--name", "Beta", "--data", data)
	if !strings.HasPrefix(str(other, "id"), "brd_") {
		t.Errorf("brands create after kill -9 printed %v", other)
	}

	// What was committed before the kill is served again.
	s = serve(t, environ, "--data", data)
	got := s.call(t, "GET", "/api/v1/offers/"+str(offer, "id"), secret, nil).expect(t, "GET the offer made before kill -9", 200).object(t)
	if !reflect.DeepEqual(got, offer) {
		t.Errorf("after kill -9 the offer is %v, want %v", got, offer)
	}
	s.call(t, "GET", "/api/v1/offers", str(key2, "key"), nil).expect(t, "the key made after kill -9", 200)
	s.stop(t)
}

// ---------------------------------------------------------------------------
// 6. Logs

func TestServerLogs(t *testing.T) {
	t.Parallel()
	environ := env()
	data := t.TempDir()
	s := serve(t, environ, "--data", data)
	// Through the server, so the secret passes through it.
	_, _, secret := setupBrand(t, environ, data, "Acme")
	raw, err := os.ReadFile(filepath.Join(data, "server.json"))
	if err != nil {
		t.Fatal(err)
	}
	var info struct{ Token string }
	if err := json.Unmarshal(raw, &info); err != nil || len(info.Token) < 16 {
		t.Fatalf("server.json: %s (%v)", raw, err)
	}

	type sent struct {
		method, path string
		resp         response
	}
	var reqs []sent
	send := func(method, path, key string, body any, status int) {
		r := s.call(t, method, path, key, body).expect(t, method+" "+path, status)
		reqs = append(reqs, sent{method, path, r})
	}
	send("GET", "/api/v1/offers", secret, nil, 200)
	send("POST", "/api/v1/offers", secret, offerInput("Logged"), 201)
	send("POST", "/api/v1/offers", secret, map[string]any{"name": 3}, 422)
	send("GET", "/api/v1/offers", "tally_sk_"+strings.Repeat("0", 48), nil, 401)
	send("GET", "/api/v1/offers", "", nil, 401)
	send("GET", "/no/such/path", secret, nil, 404)
	send("DELETE", "/api/v1/offers", secret, nil, 405)
	send("POST", "/_admin/brands", "not-the-token", map[string]any{"name": "X"}, 401)
	s.stop(t) // everything is logged by now

	lines := s.logLines(t)
	byID := map[string][]map[string]any{}
	listening := false
	for _, l := range lines {
		for _, field := range []string{"time", "level", "msg"} {
			if _, ok := l[field]; !ok {
				t.Errorf("log line without %q: %v", field, l)
			}
		}
		if l["msg"] == "listening" {
			listening = true
			// The configuration in effect: defaults, not zeros, when
			// nothing is set.
			want := map[string]any{"rateLimit": 100.0, "applicationRateLimit": 10.0, "webhookWorkers": 256.0,
				"readHeaderTimeout": "5s", "readTimeout": "15s", "writeTimeout": "30s", "idleTimeout": "1m0s",
				"logLevel": "INFO", "endpointDisableFailures": 100.0, "endpointDisableAfter": "120h0m0s", "deliveryRetentionDays": 30.0}
			for k, v := range want {
				if l[k] != v {
					t.Errorf("startup log %s = %v, want %v (in %v)", k, l[k], v, l)
				}
			}
			if p, ok := l["trustedProxies"]; !ok || p != nil {
				t.Errorf("startup log trustedProxies = %v, want null (none)", p)
			}
			if n, _ := l["maxConnections"].(float64); n < 64 {
				t.Errorf("startup log maxConnections = %v, want the cap in effect", l["maxConnections"])
			}
		}
		if l["msg"] == "request" {
			id := str(l, "requestId")
			if !strings.HasPrefix(id, "req_") {
				t.Errorf("request log line without a requestId: %v", l)
			}
			byID[id] = append(byID[id], l)
		}
	}
	if !listening {
		t.Errorf("no \"listening\" line in the log")
	}
	for _, r := range reqs {
		id := r.resp.header.Get("X-Request-Id")
		if !strings.HasPrefix(id, "req_") {
			t.Errorf("%s %s: X-Request-Id is %q", r.method, r.path, id)
			continue
		}
		got := byID[id]
		if len(got) != 1 {
			t.Errorf("%s %s: %d request log lines with requestId %s, want 1", r.method, r.path, len(got), id)
			continue
		}
		st, _ := got[0]["status"].(float64)
		if got[0]["method"] != r.method || got[0]["path"] != r.path || int(st) != r.resp.status {
			t.Errorf("%s %s → %d: logged as %v", r.method, r.path, r.resp.status, got[0])
		}
	}
	// Every request, ours, the CLI's and the readiness probes, has its own id.
	for id, ls := range byID {
		if len(ls) != 1 {
			t.Errorf("request id %s is on %d log lines: %v", id, len(ls), ls)
		}
	}
	if len(byID) < len(reqs)+2 {
		t.Errorf("%d request lines logged; want at least our %d requests and the CLI's 2", len(byID), len(reqs))
	}

	log := s.stderr.String()
	if strings.Contains(log, secret) {
		t.Errorf("the log contains the API key secret")
	}
	if strings.Contains(log, info.Token) {
		t.Errorf("the log contains the admin token")
	}
	if s.stdout.String() != "" {
		t.Errorf("the server wrote to stdout: %q", s.stdout)
	}
}

// ---------------------------------------------------------------------------
// 7. --data and TALLY_DATA

func TestDataFolderSelection(t *testing.T) {
	t.Parallel()
	envDir, flagDir := t.TempDir(), t.TempDir()
	withEnv := env("TALLY_DATA=" + envDir)
	exists := func(path string) bool { _, err := os.Stat(path); return err == nil }

	// TALLY_DATA alone picks the folder.
	brand := tallyOK(t, withEnv, "brands", "create", "--name", "Env")
	brandID := str(brand, "id")
	if !exists(filepath.Join(envDir, "tally.db")) {
		t.Fatalf("with TALLY_DATA=%s the store is not there", envDir)
	}
	tallyOK(t, withEnv, "keys", "create", "--brand", brandID)

	// --data wins over TALLY_DATA: that brand is not in the flag's folder.
	tallyFails(t, withEnv, []string{"keys", "create", "--brand", brandID, "--data", flagDir}, brandID)
	other := tallyOK(t, withEnv, "brands", "create", "--name", "Flag", "--data", flagDir)
	if !exists(filepath.Join(flagDir, "tally.db")) {
		t.Fatalf("with --data %s the store is not there", flagDir)
	}
	tallyOK(t, env(), "keys", "create", "--brand", str(other, "id"), "--data", flagDir)
	list := tallyOK(t, withEnv, "keys", "list", "--brand", brandID)
	if items, _ := list["data"].([]any); len(items) != 1 {
		t.Errorf("keys list in TALLY_DATA: %v; want the one key made there", list)
	}

	// The same for serve: server.json lands in the folder in use.
	s := serve(t, withEnv, "--data", flagDir)
	if !exists(filepath.Join(flagDir, "server.json")) || exists(filepath.Join(envDir, "server.json")) {
		t.Errorf("serve --data %s with TALLY_DATA=%s: server.json is not (only) in the --data folder", flagDir, envDir)
	}
	s.stop(t)
	s = serve(t, withEnv)
	if !exists(filepath.Join(envDir, "server.json")) {
		t.Errorf("serve with TALLY_DATA=%s: no server.json there", envDir)
	}
	s.stop(t)
}
