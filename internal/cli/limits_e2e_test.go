package cli_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/reporoot"
	"github.com/tally-hq/tally/internal/testenv"
)

// rawRequest sends one request over conn and reads its answer, leaving the
// connection open (keep-alive).
func rawRequest(conn net.Conn, br *bufio.Reader, host, path string) (*http.Response, []byte, error) {
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, host); err != nil {
		return nil, nil, err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

// TestIdleConnectionsCannotStarveTheServer holds 250 keep-alive connections
// open against a server that may have only 256 files open (the shell's
// ulimit), then sends a normal request: it must be served, because the
// server caps its connections below its file limit and closes the ones
// that have been idle longest to make room.
func TestIdleConnectionsCannotStarveTheServer(t *testing.T) {
	t.Parallel()
	// (A rate limit out of the way: every request here is from one IP.)
	s := serveThrough(t, env("TALLY_RATE_LIMIT=100000"), []string{"/bin/sh", "-c", `ulimit -n 256 && exec "$@"`, "sh"}, "--data", t.TempDir())

	type held struct {
		conn net.Conn
		br   *bufio.Reader
	}
	var conns []held
	defer func() {
		for _, h := range conns {
			h.conn.Close()
		}
	}()
	for i := range 250 {
		conn, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
		h := held{conn, bufio.NewReader(conn)}
		conns = append(conns, h)
		// Generous: an answer takes milliseconds; no answer at all is
		// what this test is about.
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		resp, _, err := rawRequest(conn, h.br, s.addr, "/")
		if err != nil {
			t.Fatalf("connection %d got no answer (the server stopped accepting): %v", i+1, err)
		}
		if resp.StatusCode != 404 {
			t.Fatalf("connection %d: status %d", i+1, resp.StatusCode)
		}
	}
	// A normal request, on a connection of its own, is served.
	s.call(t, "GET", "/api/public/webhook-events", "", nil).expect(t, "GET /api/public/webhook-events with 250 idle connections open", 200)

	// The server made room by closing the connections idle longest: the
	// first one is closed (EOF), while the last one still works.
	first := conns[0]
	_ = first.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := first.br.ReadByte(); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isConnReset(err) {
		t.Errorf("the oldest idle connection: read %v, want it closed by the server", err)
	}
	last := conns[len(conns)-1]
	if resp, _, err := rawRequest(last.conn, last.br, s.addr, "/"); err != nil || resp.StatusCode != 404 {
		t.Errorf("the newest idle connection no longer works: %v", err)
	}
	if log := s.stderr.String(); strings.Contains(log, "too many open files") {
		t.Errorf("the server ran out of file descriptors:\n%s", log)
	}
}

func isConnReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

// TestSlowBodyIsCutOff sends a request whose body never finishes: the
// server answers it 408 in the error shape after its read timeout (15 s)
// and closes the connection, while other requests are served meanwhile.
func TestSlowBodyIsCutOff(t *testing.T) {
	t.Parallel()
	s := serve(t, env(), "--data", t.TempDir())
	conn, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "POST /api/public/brands/brd_01jd0000000000000000000000/applications HTTP/1.1\r\n"+
		"Host: %s\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", s.addr); err != nil {
		t.Fatal(err)
	}
	trickle(t, 200*time.Millisecond, conn)
	s.call(t, "GET", "/api/public/webhook-events", "", nil).expect(t, "a request while a slow body trickles in", 200)

	// 15 s plus a generous margin for a loaded machine.
	_ = conn.SetReadDeadline(time.Now().Add(45 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the slow request got no answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e struct {
		Error struct{ Code, Message string }
	}
	if resp.StatusCode != 408 || json.Unmarshal(body, &e) != nil || e.Error.Code != "request_timeout" {
		t.Errorf("slow body: %d %s, want 408 request_timeout in the error shape", resp.StatusCode, body)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Errorf("the connection stayed open after the 408")
	}
}

// TestMakeRunTakesAnAddressAndAFolder runs `make run ADDR=… DATA=…` from
// the repository, as the README says, and finds the server there, with its
// store in that folder.
func TestMakeRunTakesAnAddressAndAFolder(t *testing.T) {
	t.Parallel()
	root, err := reporoot.Find()
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	s := &server{addr: fmt.Sprintf("127.0.0.1:%d", freePort(t)), stdout: &testenv.SyncBuffer{}, stderr: &testenv.SyncBuffer{}, done: make(chan struct{})}
	s.cmd = exec.Command("make", "--no-print-directory", "run", "ADDR="+s.addr, "DATA="+data, "ARGS=--pprof=")
	s.cmd.Dir, s.cmd.Env, s.cmd.Stdout, s.cmd.Stderr = root, env(), s.stdout, s.stderr
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // make, go run and the server: one group to stop
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.waitErr = s.cmd.Wait(); close(s.done) }()
	stop := func() {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
	}
	t.Cleanup(stop)
	// go run compiles first: a generous wait.
	if err := s.waitReady(120 * time.Second); err != nil {
		t.Fatalf("make run ADDR=%s: %v\n%s", s.addr, err, s.stderr)
	}
	if _, err := os.Stat(filepath.Join(data, "tally.db")); err != nil {
		t.Errorf("make run DATA=%s: no store there: %v", data, err)
	}
}
