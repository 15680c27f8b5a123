// Package dynamotest gives tests a DynamoDB to talk to: the endpoint named
// by TALLY_TEST_DYNAMODB_ENDPOINT if set, or else a DynamoDB Local that the
// test binary starts itself from the jar that `make dynamodb-local` fetches
// (scripts/test.sh leaves it to each binary: one instance per package keeps
// packages tested at once from queueing on each other's writes). A test
// that needs a DynamoDB Local of its own asks for PrivateEndpoint.
//
// A package whose tests use it calls Main from its TestMain:
//
//	func TestMain(m *testing.M) { dynamotest.Main(m) }
package dynamotest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/logging"

	"github.com/tally-hq/tally/internal/reporoot"
	"github.com/tally-hq/tally/internal/store/dynamo"
)

// EndpointEnv names the variable that points tests at a running DynamoDB.
const EndpointEnv = "TALLY_TEST_DYNAMODB_ENDPOINT"

// startTimeout bounds how long DynamoDB Local may take to open its port; it
// usually needs about two seconds, and far more on a busy machine.
const startTimeout = 90 * time.Second

var (
	inMain bool // Main is running the tests, so it will stop what we start

	once   sync.Once
	shared struct {
		local   *local
		missing string // why there is nothing to start, if so
		err     error
	}
)

// Main runs the tests and then stops the DynamoDB Local that Endpoint may
// have started.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main without the exit, for a Main that stops more helpers
// (sqstest.Main): it runs the tests, stops DynamoDB Local and returns the
// exit code.
func Run(m *testing.M) int {
	inMain = true
	code := m.Run()
	if shared.local != nil {
		shared.local.stop()
	}
	return code
}

// Endpoint returns the URL of a DynamoDB for tests. Without
// TALLY_TEST_DYNAMODB_ENDPOINT it starts DynamoDB Local once per test
// binary; when the jar is not there it skips the test, or fails it when the
// CI variable is set, since CI must not silently skip.
func Endpoint(t testing.TB) string {
	t.Helper()
	if e := os.Getenv(EndpointEnv); e != "" {
		return e
	}
	if !inMain {
		t.Fatalf("dynamotest: call dynamotest.Main from TestMain, so that the DynamoDB Local this test starts is stopped (or set %s)", EndpointEnv)
	}
	once.Do(func() { shared.local, shared.missing, shared.err = start() })
	switch {
	case shared.missing != "":
		reporoot.Missing(t, shared.missing)
	case shared.err != nil:
		t.Fatal(shared.err)
	}
	return shared.local.endpoint
}

// PrivateEndpoint starts a DynamoDB Local for this test alone, even when
// TALLY_TEST_DYNAMODB_ENDPOINT names a shared one, and stops it when the
// test ends: for a test that waits for DynamoDB Local's TTL sweep, which
// on a shared instance works through every other test's tables too (and can
// stop for good on one of their items; see internal/store/dynamo's
// TestExpiredItemsAreDeleted). It costs a JVM start, a few seconds. Without
// the jar it skips or fails as Endpoint does.
func PrivateEndpoint(t testing.TB) string {
	t.Helper()
	l, missing, err := start()
	switch {
	case missing != "":
		reporoot.Missing(t, missing)
	case err != nil:
		t.Fatal(err)
	}
	t.Cleanup(l.stop)
	return l.endpoint
}

// local is a DynamoDB Local that this test binary started.
type local struct {
	endpoint string
	cmd      *exec.Cmd
	exited   chan error
}

// start starts DynamoDB Local from the jar in .cache on a free port and
// waits until it listens. missing says why there is no jar to start, if so.
func start() (l *local, missing string, err error) {
	root, err := reporoot.Find()
	if err != nil {
		return nil, "", err
	}
	dir := filepath.Join(root, ".cache", "dynamodb-local")
	jar := filepath.Join(dir, "DynamoDBLocal.jar")
	if _, err := os.Stat(jar); err != nil {
		return nil, fmt.Sprintf("dynamotest: no DynamoDB Local at %s: run `make dynamodb-local` first", jar), nil
	}
	// The port is free when picked but can be taken before the JVM binds it
	// (the tests' outgoing connections draw from the same range): then
	// DynamoDB Local exits, and another port is tried.
	for range 3 {
		var port string
		if port, err = freePort(); err != nil {
			return nil, "", err
		}
		if l, err = launch(dir, jar, port); !errors.Is(err, errExited) {
			break
		}
	}
	return l, "", err
}

var errExited = errors.New("dynamotest: DynamoDB Local exited")

// launch starts DynamoDB Local on port and waits until it listens.
func launch(dir, jar, port string) (*local, error) {
	var out bytes.Buffer
	// -sharedDb: one database whatever the credentials and region, so
	// clients configured from the environment see the same tables.
	cmd := exec.Command("java",
		"-Djava.library.path="+filepath.Join(dir, "DynamoDBLocal_lib"),
		"-jar", jar, "-inMemory", "-sharedDb", "-disableTelemetry", "-port", port)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = ProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("dynamotest: start DynamoDB Local: %w", err)
	}
	l := &local{cmd: cmd, exited: make(chan error, 1)}
	go func() { l.exited <- cmd.Wait() }()

	addr := net.JoinHostPort("127.0.0.1", port)
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case err := <-l.exited:
			return nil, fmt.Errorf("%w (%v):\n%s", errExited, err, out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			l.endpoint = "http://" + addr
			return l, nil
		}
		if time.Now().After(deadline) {
			l.stop()
			return nil, fmt.Errorf("dynamotest: DynamoDB Local did not open %s within %v:\n%s", addr, startTimeout, out.String())
		}
	}
}

// stop kills DynamoDB Local and waits for it to exit.
func (l *local) stop() {
	if l.cmd == nil {
		return
	}
	l.cmd.Process.Kill()
	<-l.exited
	l.cmd = nil
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("dynamotest: find a free port: %w", err)
	}
	defer l.Close()
	_, port, err := net.SplitHostPort(l.Addr().String())
	return port, err
}

// newClient returns a client for endpoint with the dummy credentials and
// region DynamoDB Local needs. SDK log output goes to the test log.
func newClient(t testing.TB, endpoint string) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("tally", "tally", ""),
		BaseEndpoint: aws.String(endpoint),
		Logger: logging.LoggerFunc(func(c logging.Classification, format string, v ...any) {
			t.Logf("aws sdk %s: "+format, append([]any{c}, v...)...)
		}),
		// DynamoDB Local sends no X-Amz-Crc32 header with error responses
		// (such as a failed condition), which the SDK checks against 0 and
		// then logs a warning about. Real DynamoDB always sends it.
		DisableValidateResponseChecksum: true,
	})
}

// NewTable creates a table of its own for the test, laid out by
// dynamo.CreateTable but without TTL, and deletes it when the test ends.
// DynamoDB Local expires items by the real clock, which is not the test's
// (testenv, "Clocks").
func NewTable(t testing.TB) (client *dynamodb.Client, table string) {
	t.Helper()
	return newTable(t, Endpoint(t), dynamo.WithoutTTL())
}

// NewTableWithTTL is NewTable with TTL on, as deployed: for the tests of
// the table's layout. A test that waits for expired items to go uses
// NewPrivateTableWithTTL.
func NewTableWithTTL(t testing.TB) (client *dynamodb.Client, table string) {
	t.Helper()
	return newTable(t, Endpoint(t))
}

// NewPrivateTableWithTTL is NewTableWithTTL on a DynamoDB Local of the
// test's own (PrivateEndpoint), whose TTL sweep has no other table to work
// through: for the tests of expiry.
func NewPrivateTableWithTTL(t testing.TB) (client *dynamodb.Client, table string) {
	t.Helper()
	return newTable(t, PrivateEndpoint(t))
}

func newTable(t testing.TB, endpoint string, opts ...dynamo.TableOption) (client *dynamodb.Client, table string) {
	t.Helper()
	client = newClient(t, endpoint)
	table = tableName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := dynamo.CreateTable(ctx, client, table, opts...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)}); err != nil {
			t.Errorf("dynamotest: delete table %s: %v", table, err)
		}
	})
	return client, table
}

var unsafeChars = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

// tableName makes a valid, unique table name that shows which test made it.
// The random part keeps runs against a long-lived endpoint apart.
func tableName(test string) string {
	name := strings.Trim(unsafeChars.ReplaceAllString(test, "_"), "_")
	if len(name) > 200 {
		name = name[:200]
	}
	return "tally_" + name + "_" + rand.Text()[:12]
}
