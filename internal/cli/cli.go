// Package cli is the tally command: the local server and the admin commands
// that create brands and API keys.
//
// Admin commands are requests to the admin API. When a local server holds
// the embedded store (bbolt allows one process at a time), they go to that
// server over loopback, authenticated with the token it leaves in the data
// folder; otherwise the command opens the store itself and serves the same
// requests in-process.
package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/tally-hq/tally/internal/app"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/store/bolt"
	"github.com/tally-hq/tally/internal/store/dynamo"
)

const usage = `Usage:
  tally serve [--addr 127.0.0.1:8080] [--data DIR]   run every function in one local server
  tally brands create --name NAME [--data DIR]       create a brand
  tally brands list [--data DIR]                     list the brands, newest first
  tally keys create --brand BRAND_ID [--name NAME] [--data DIR]
                                                      create an API key (the secret is shown once)
  tally keys list --brand BRAND_ID [--data DIR]       list a brand's keys
  tally keys revoke KEY_ID [--data DIR]               revoke a key
  tally users create --brand BRAND_ID --email EMAIL [--data DIR]
                                                      create a dashboard user; the password is read
                                                      from standard input (one line)
  tally users reset --email EMAIL [--url BASE_URL] [--data DIR]
                                                      make a password reset link for a dashboard
                                                      user (works once, for an hour)
  tally table create                                  create the DynamoDB table TALLY_TABLE
  tally listen [--port 9000] [--secret SECRET] [--status 204]
                                                      a webhook receiver for development: checks
                                                      each delivery's signature and prints it

The embedded store lives in --data (or $TALLY_DATA, default ./.tally). With
TALLY_TABLE set, every command uses that DynamoDB table instead, at the
endpoint the AWS SDK is configured for (AWS_ENDPOINT_URL for local emulators).
Run 'tally COMMAND -h' for a command's flags.
`

// Run runs the command line args (without the program name) and returns the
// exit code: 0 when it worked or help was asked for (on stdout), 2 for a
// command line that cannot run as written, 1 when the command failed.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	err := run(ctx, args, stdin, stdout, stderr)
	var help helpRequest
	var misuse usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &help):
		fmt.Fprint(stdout, help.text())
		return 0
	case errors.Is(err, errNoCommand):
		fmt.Fprint(stderr, usage)
		return 2
	case errors.As(err, &misuse):
		fmt.Fprintf(stderr, "tally: %v\nRun 'tally help' for usage.\n", err)
		return 2
	}
	fmt.Fprintln(stderr, "tally:", err)
	return 1
}

// errNoCommand is a command line that names no command tally has.
var errNoCommand = errors.New("no such command")

// helpRequest is -h or --help (or `tally help`): the usage of the command
// it names (fs), or of every command (fs nil).
type helpRequest struct{ fs *flag.FlagSet }

func (helpRequest) Error() string { return "help requested" }

func (h helpRequest) text() string {
	if h.fs == nil {
		return usage
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Usage:\n  %s\n", synopsis(h.fs.Name()))
	n := 0
	h.fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		b.WriteString("\nFlags:\n")
		h.fs.SetOutput(&b)
		h.fs.PrintDefaults()
	}
	return b.String()
}

// synopsis is the command's line of the usage text, without its description.
func synopsis(name string) string {
	for _, line := range strings.Split(usage, "\n") {
		line = strings.TrimSpace(line)
		if line == "tally "+name || strings.HasPrefix(line, "tally "+name+" ") {
			cmd, _, _ := strings.Cut(line, "   ")
			return cmd
		}
	}
	return "tally " + name
}

// usageError is a command line that cannot run as written: an unknown
// flag, a required one missing, an argument too many.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }

func misuse(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// parseFlags parses a command's flags and refuses arguments that are not
// flags (the commands that take one use parseInterspersed).
func parseFlags(fs *flag.FlagSet, args []string) error {
	positional, err := parseInterspersed(fs, args)
	if err == nil && len(positional) > 0 {
		return misuse("%s takes no arguments, got %q", fs.Name(), positional)
	}
	return err
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	cmd := func(n int) string {
		if len(args) > n {
			return args[n]
		}
		return ""
	}
	if cmd(0) == "help" || isHelpFlag(cmd(0)) {
		return helpRequest{}
	}
	switch cmd(0) + " " + cmd(1) {
	case "brands create":
		fs, data := flags("brands create")
		name := fs.String("name", "", "brand name")
		if err := parseFlags(fs, args[2:]); err != nil {
			return err
		}
		if *name == "" {
			return misuse("brands create needs --name")
		}
		return adminCall(ctx, *data, stdout, stderr, "POST", "/_admin/brands", map[string]string{"name": *name})
	case "brands list":
		fs, data := flags("brands list")
		if err := parseFlags(fs, args[2:]); err != nil {
			return err
		}
		return adminCall(ctx, *data, stdout, stderr, "GET", "/_admin/brands?limit=100", nil)
	case "keys create":
		fs, data := flags("keys create")
		brand := fs.String("brand", "", "brand id")
		name := fs.String("name", "", "a label for the key")
		if err := parseFlags(fs, args[2:]); err != nil {
			return err
		}
		if *brand == "" {
			return misuse("keys create needs --brand")
		}
		return adminCall(ctx, *data, stdout, stderr, "POST", "/_admin/keys", map[string]string{"brandId": *brand, "name": *name})
	case "keys list":
		fs, data := flags("keys list")
		brand := fs.String("brand", "", "brand id")
		if err := parseFlags(fs, args[2:]); err != nil {
			return err
		}
		if *brand == "" {
			return misuse("keys list needs --brand")
		}
		return adminCall(ctx, *data, stdout, stderr, "GET", "/_admin/keys?limit=100&brandId="+url.QueryEscape(*brand), nil)
	case "keys revoke":
		fs, data := flags("keys revoke")
		positional, err := parseInterspersed(fs, args[2:])
		if err != nil {
			return err
		}
		if len(positional) != 1 {
			return misuse("keys revoke needs the key id: tally keys revoke KEY_ID")
		}
		return adminCall(ctx, *data, stdout, stderr, "POST", "/_admin/keys/"+url.PathEscape(positional[0])+"/revoke", nil)
	case "users create":
		fs, data := flags("users create")
		brand := fs.String("brand", "", "brand id")
		email := fs.String("email", "", "the user's e-mail address")
		if err := parseFlags(fs, args[2:]); err != nil {
			return err
		}
		if *brand == "" || *email == "" {
			return misuse("users create needs --brand and --email (and the password on standard input)")
		}
		pw, err := readPassword(stdin, stderr)
		if err != nil {
			return err
		}
		return adminCall(ctx, *data, stdout, stderr, "POST", "/_admin/users", map[string]string{"brandId": *brand, "email": *email, "password": pw})
	case "users reset":
		fs, data := flags("users reset")
		email := fs.String("email", "", "the user's e-mail address")
		base := fs.String("url", "http://127.0.0.1:8080", "the public base URL the link starts with")
		if err := parseFlags(fs, args[2:]); err != nil {
			return err
		}
		if *email == "" {
			return misuse("users reset needs --email")
		}
		return adminCall(ctx, *data, stdout, stderr, "POST", "/_admin/users/reset", map[string]string{"email": *email, "baseUrl": *base})
	case "table create":
		if err := parseFlags(flag.NewFlagSet("table create", flag.ContinueOnError), args[2:]); err != nil {
			return err
		}
		return createTable(ctx, stdout)
	}
	switch cmd(0) {
	case "serve":
		return serve(ctx, args[1:], stderr)
	case "listen":
		return listen(ctx, args[1:], stdout, stderr)
	}
	if slices.ContainsFunc(args, isHelpFlag) { // tally keys -h: help with a command that is not one
		return helpRequest{}
	}
	return errNoCommand
}

func isHelpFlag(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

func flags(name string) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	data := fs.String("data", "", "embedded store folder (default $TALLY_DATA or ./.tally)")
	return fs, data
}

// parseInterspersed parses flags wherever they stand among the positional
// arguments (the flag package stops at the first positional one) and
// returns the positional arguments. -h or --help is a helpRequest for the
// command, any other flag error a usageError.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard) // the errors say it, and Run prints help
	var positional []string
	for {
		err := fs.Parse(args)
		switch {
		case errors.Is(err, flag.ErrHelp):
			return nil, helpRequest{fs}
		case err != nil:
			return nil, usageError{err}
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// serverInfo is what a running local server leaves in its data folder so
// that admin commands can reach it.
type serverInfo struct {
	Addr  string `json:"addr"`
	Token string `json:"token"`
}

func serverInfoPath(dataDir string) string { return filepath.Join(dataDir, "server.json") }

// adminCall performs one admin API request and prints its JSON answer.
func adminCall(ctx context.Context, dataFlag string, stdout, stderr io.Writer, method, path string, body any) error {
	var payload []byte
	if body != nil {
		payload, _ = json.Marshal(body)
	}
	dataDir := app.DataDir(dataFlag)
	// ./.tally is relative to where the command runs: run elsewhere than
	// the server, it would quietly start a store of its own.
	_, statErr := os.Stat(app.StorePath(dataDir))
	newDefault := dataDir == app.DefaultDataDir && !app.UsesDynamoDB() && errors.Is(statErr, fs.ErrNotExist)
	status, answer, err := adminLocal(ctx, dataDir, method, path, payload)
	if errors.Is(err, bolt.ErrLocked) {
		status, answer, err = adminRemote(ctx, dataDir, method, path, payload)
	}
	if err != nil {
		return err
	}
	if newDefault {
		abs, _ := filepath.Abs(dataDir)
		fmt.Fprintf(stderr, "tally: made a new store in %s: there was none. The default folder ./%[2]s is relative to the current directory; "+
			"to use the store of a server started elsewhere (make run: the repository's %[2]s), run from there or give --data or TALLY_DATA.\n",
			abs, app.DefaultDataDir)
	}
	if status >= 300 {
		var e struct {
			Error struct{ Code, Message string }
		}
		if json.Unmarshal(answer, &e) == nil && e.Error.Message != "" {
			return fmt.Errorf("%s (%s)", e.Error.Message, e.Error.Code)
		}
		return fmt.Errorf("the server answered %d: %s", status, answer)
	}
	_, err = stdout.Write(answer)
	return err
}

// adminLocal opens the store and serves the request in-process.
func adminLocal(ctx context.Context, dataDir, method, path string, payload []byte) (int, []byte, error) {
	st, err := openStore(ctx, dataDir)
	if err != nil {
		return 0, nil, err
	}
	defer st.Close()
	token := newToken()
	api := httpapi.New(service.New(st).API(), httpapi.Config{AdminToken: token, Logger: discardLogger()})
	req := httptest.NewRequestWithContext(ctx, method, path, bytes.NewReader(payload))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	api.Handler(httpapi.GroupAdmin).ServeHTTP(rec, req)
	return rec.Code, rec.Body.Bytes(), nil
}

// adminRemote sends the request to the local server that holds the store.
func adminRemote(ctx context.Context, dataDir, method, path string, payload []byte) (int, []byte, error) {
	raw, err := os.ReadFile(serverInfoPath(dataDir))
	if err != nil {
		return 0, nil, fmt.Errorf("the store in %s is in use by another process, and no local server there can be reached (%v)", dataDir, err)
	}
	var info serverInfo
	if err := json.Unmarshal(raw, &info); err != nil {
		return 0, nil, fmt.Errorf("read %s: %w", serverInfoPath(dataDir), err)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+info.Addr+path, bytes.NewReader(payload))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+info.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("the store in %s is in use by the local server at %s, which did not answer: %w", dataDir, info.Addr, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	return resp.StatusCode, answer, err
}

func newToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return hex.EncodeToString(b)
}

func createTable(ctx context.Context, stdout io.Writer) error {
	table := os.Getenv(app.EnvTable)
	if table == "" {
		return fmt.Errorf("set %s to the table's name (and AWS_ENDPOINT_URL for a local endpoint)", app.EnvTable)
	}
	client, err := dynamoClient(ctx)
	if err != nil {
		return err
	}
	if err := dynamo.CreateTable(ctx, client, table); err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(map[string]string{"table": table, "status": "ACTIVE"})
}

// readPassword reads a password: one line of stdin, without its line end.
// On a terminal it prompts on stderr and does not echo what is typed.
func readPassword(stdin io.Reader, stderr io.Writer) (string, error) {
	if f, ok := stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(stderr, "Password: ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(stderr)
		return string(b), err
	}
	line, err := bufio.NewReader(io.LimitReader(stdin, 4096)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
	if line == "" {
		return "", errors.New("no password on standard input: pipe one line, e.g. printf '%s\\n' \"$PASSWORD\" | tally users create …")
	}
	return line, nil
}
