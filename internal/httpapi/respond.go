package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/fields"
	"github.com/tally-hq/tally/internal/jsonenc"
)

// MaxBodyBytes is the largest request body accepted.
const MaxBodyBytes = 1 << 20

var statusOf = map[string]int{
	tally.ECodeUnauthorized:         http.StatusUnauthorized,
	tally.ECodeNotFound:             http.StatusNotFound,
	tally.ECodeMethodNotAllowed:     http.StatusMethodNotAllowed,
	tally.ECodeValidation:           http.StatusUnprocessableEntity,
	tally.ECodeCapReached:           http.StatusUnprocessableEntity,
	tally.ECodeRateLimited:          http.StatusTooManyRequests,
	tally.ECodeInvalidJSON:          http.StatusBadRequest,
	tally.ECodePayloadTooLarge:      http.StatusRequestEntityTooLarge,
	tally.ECodeHeadersTooLarge:      http.StatusRequestHeaderFieldsTooLarge,
	tally.ECodeRequestTimeout:       http.StatusRequestTimeout,
	tally.ECodeUnsupportedMediaType: http.StatusUnsupportedMediaType,
	tally.ECodeConflict:             http.StatusConflict,
	tally.ECodeInvalidTransition:    http.StatusConflict,
	tally.ECodeInternal:             http.StatusInternalServerError,
	tally.ECodeUnavailable:          http.StatusServiceUnavailable,
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// ErrorBody returns the status and the JSON body (the spec's error shape)
// that answer err. Errors that are not a *tally.Error answer 500 with a
// message that leaks nothing.
func ErrorBody(err error) (int, []byte) {
	var body errorBody
	body.Error.Code, body.Error.Message = tally.ErrorCode(err), tally.ErrorMessage(err)
	b, _ := json.Marshal(body) // two strings always marshal
	return statusOf[body.Error.Code], append(b, '\n')
}

// statusClientClosed is logged for requests their client abandoned.
const statusClientClosed = 499

// writeError answers with the error shape and logs errors not meant for users.
// A 401 names the scheme to use (RFC 9110 section 11.6.1), and says the token
// was refused when one was sent (RFC 6750 section 3).
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		// The client hung up: nobody reads the answer, and it is not our
		// fault. 499 (nginx's "client closed request") tells the log so.
		logger(r.Context()).Info("client closed the request", "err", err.Error())
		w.WriteHeader(statusClientClosed)
		return
	}
	switch tally.ErrorCode(err) {
	case tally.ECodeInternal:
		logger(r.Context()).Error("internal error", "err", err.Error())
	case tally.ECodeUnauthorized:
		challenge := `Bearer realm="tally"`
		if r.Header.Get("Authorization") != "" {
			challenge += `, error="invalid_token"`
		}
		w.Header().Set("WWW-Authenticate", challenge)
	}
	status, body := ErrorBody(err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body) // the client went away; nothing left to tell it
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client went away; nothing left to tell it
}

// bodies holds the buffers that writeConversion writes bodies in.
var bodies = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// writeConversion is writeJSON(w, status, c) without reflection, for the
// answer to every POST /conversions.
func writeConversion(w http.ResponseWriter, status int, c *tally.Conversion) {
	bp := bodies.Get().(*[]byte)
	b := append(jsonenc.Conversion((*bp)[:0], c, jsonenc.KeepHTML), '\n')
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b) // the client went away; nothing left to tell it
	*bp = b
	bodies.Put(bp)
}

// listBody is the shape of every list answer.
type listBody[T any] struct {
	Data       []T     `json:"data"`
	NextCursor *string `json:"nextCursor"`
}

func writeList[T any](w http.ResponseWriter, items []T, next string) {
	body := listBody[T]{Data: items}
	if next != "" {
		body.NextCursor = &next
	}
	writeJSON(w, http.StatusOK, body)
}

// decodeBody reads a JSON object into v, strictly: JSON content type, at most
// MaxBodyBytes, valid UTF-8 (encoding/json would quietly replace invalid
// bytes and lone surrogate escapes with U+FFFD), field names exactly as
// documented and each once (encoding/json matches names in any case and
// keeps the last of duplicates), no unknown fields, values of the right
// types, nothing after the object; and no query parameters, which no route
// with a body takes.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	bp := bodies.Get().(*[]byte)
	raw, err := readBody(w, r, v, (*bp)[:0])
	if raw != nil && cap(raw) <= maxPooled {
		*bp = raw // nothing decoded keeps it: encoding/json copies what it keeps
	}
	bodies.Put(bp)
	return err
}

// maxPooled is the largest buffer kept in bodies: a rare large body
// should not stay in memory for good.
const maxPooled = 64 << 10

// decodeOptionalBody is decodeBody for a route whose every field is
// optional (POST /keys): a request without a body (curl -X POST, no -d)
// takes the defaults, as {} would, whatever its Content-Type says. A body
// that is there is read as strictly as decodeBody reads it.
func decodeOptionalBody(w http.ResponseWriter, r *http.Request, v any) error {
	if r.ContentLength == 0 {
		_, err := query(r)
		return err
	}
	return decodeBody(w, r, v)
}

// decodePatch is decodeBody for a PATCH, which changes the fields it names
// and keeps the others. A field given as null is refused: it would decode
// as one left out, and the request would change nothing without a word
// (inside an object, a null may mean something: a cap of null removes it).
// An empty object changes nothing and answers the record as it is, as
// Stripe's updates do.
func decodePatch(w http.ResponseWriter, r *http.Request, v any) error {
	raw, err := readBody(w, r, v, nil)
	if err != nil {
		return err
	}
	var given map[string]json.RawMessage
	if err := json.Unmarshal(raw, &given); err != nil {
		return bodyError(err, nil)
	}
	for _, name := range slices.Sorted(maps.Keys(given)) {
		if string(given[name]) == "null" {
			return tally.Errorf(tally.ECodeValidation, "%s cannot be null: leave it out to keep it as it is.", name)
		}
	}
	return nil
}

// readBody is decodeBody, answering the body it read as well, appended
// to buf.
func readBody(w http.ResponseWriter, r *http.Request, v any, buf []byte) ([]byte, error) {
	if _, err := query(r); err != nil {
		return nil, err
	}
	if r.ContentLength == 0 { // nothing sent: what is missing is the body, not a Content-Type
		return nil, errEmptyBody
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return nil, tally.Errorf(tally.ECodeUnsupportedMediaType, "Send the body as JSON with 'Content-Type: application/json'.")
	}
	raw, err := readAppend(http.MaxBytesReader(w, r.Body, MaxBodyBytes), buf)
	if err != nil {
		return raw, bodyError(err, nil)
	}
	if !utf8.Valid(raw) || hasLoneSurrogate(raw) {
		return nil, tally.Errorf(tally.ECodeInvalidJSON, "The body is not valid UTF-8 (or escapes half of a surrogate pair); send text as UTF-8.")
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, errEmptyBody
	}
	if in, ok := v.(*conversions.ConversionInput); ok && decodeConversion(raw, in) {
		return raw, nil
	}
	return raw, parseBody(raw, v)
}

// parseBody is the part of readBody that checks and decodes a JSON text
// (valid UTF-8, not empty) into v.
func parseBody(raw []byte, v any) error {
	t := reflect.TypeOf(v)
	if !json.Valid(raw) {
		return bodyError(json.Unmarshal(raw, v), t) // for the syntax error's words
	}
	if bytes.TrimSpace(raw)[0] != '{' { // a null would decode as {}, changing nothing
		return tally.Errorf(tally.ECodeValidation, "The body must be a JSON object.")
	}
	if err := (&fieldWalk{raw: raw}).value(t, ""); err != nil {
		return bodyError(err, t)
	}
	// The walk refused every name that is not a field's.
	if err := json.Unmarshal(raw, v); err != nil {
		return bodyError(err, t)
	}
	return nil
}

// readAppend is io.ReadAll appending to b.
func readAppend(r io.Reader, b []byte) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

var errEmptyBody = tally.Errorf(tally.ECodeInvalidJSON, "The body is empty; send a JSON object.")

// fieldError is a field name fieldWalk refuses.
type fieldError struct{ msg string }

func (e *fieldError) Error() string { return e.msg }

// fieldWalk goes through a valid JSON text and checks that every object key
// in it is the exact name of a field of the Go type the object decodes into
// (see package fields), and that no object repeats a key. Values whose shape
// does not match the type are walked through; decoding reports them. It
// allocates nothing on the way but for keys written with escapes.
type fieldWalk struct {
	raw []byte
	i   int
}

func (w *fieldWalk) space() { w.i = skipSpace(w.raw, w.i) }

// skipSpace is the index of the first byte of b from i on that is not JSON
// white space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// value walks the value at w.i, which decodes into t (nil: unknown), at
// path (for messages).
func (w *fieldWalk) value(t reflect.Type, path string) error {
	w.space()
	switch w.raw[w.i] {
	case '{':
		return w.object(derefType(t), path)
	case '[':
		var elem reflect.Type
		if t = derefType(t); t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		w.i++
		for n := 0; ; n++ {
			w.space()
			switch w.raw[w.i] {
			case ']':
				w.i++
				return nil
			case ',':
				w.i++
			}
			if err := w.value(elem, fmt.Sprintf("%s[%d]", path, n)); err != nil {
				return err
			}
		}
	case '"':
		w.str()
	default: // a number, true, false or null
		for w.i < len(w.raw) && !strings.ContainsRune(",}] \t\n\r", rune(w.raw[w.i])) {
			w.i++
		}
	}
	return nil
}

func (w *fieldWalk) object(t reflect.Type, path string) error {
	known := fields.Of(t)
	var seen [16][]byte
	keys := seen[:0]
	w.i++
	for {
		w.space()
		switch w.raw[w.i] {
		case '}':
			w.i++
			return nil
		case ',':
			w.i++
			w.space()
		}
		key := w.str()
		w.space()
		w.i++ // the colon
		for _, k := range keys {
			if bytes.Equal(k, key) || bytes.ContainsRune(k, '\\') != bytes.ContainsRune(key, '\\') && keyString(k) == keyString(key) {
				return &fieldError{fmt.Sprintf("Field %s is given more than once.", joinPath(path, keyString(key)))}
			}
		}
		keys = append(keys, key)
		var ft reflect.Type
		switch {
		case known != nil:
			var f fields.Field
			var ok bool
			if bytes.IndexByte(key, '\\') < 0 {
				f, ok = known[string(key)] // no allocation
			} else {
				f, ok = known[keyString(key)]
			}
			if !ok {
				return unknownField(joinPath(path, keyString(key)), keyString(key), known)
			}
			ft = f.Type
		case t != nil && t.Kind() == reflect.Map:
			ft = t.Elem()
		}
		w.space()
		nested := ""
		if c := w.raw[w.i]; c == '{' || c == '[' { // only containers need their path
			nested = joinPath(path, keyString(key))
		}
		if err := w.value(ft, nested); err != nil {
			return err
		}
	}
}

// str returns the string at w.i as written, without its quotes.
func (w *fieldWalk) str() []byte {
	start := w.i + 1
	for w.i = start; w.raw[w.i] != '"'; w.i++ {
		if w.raw[w.i] == '\\' {
			w.i++
		}
	}
	w.i++
	return w.raw[start : w.i-1]
}

// keyString is a key as it decodes; the conversion of one without escapes
// allocates nothing when it only indexes a map.
func keyString(raw []byte) string {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw)
	}
	var s string
	_ = json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &s)
	return s
}

func unknownField(name, key string, known map[string]fields.Field) error {
	for k := range known {
		if strings.EqualFold(k, key) {
			return &fieldError{fmt.Sprintf("Unknown field %s; field names are case-sensitive: did you mean %s?", name, k)}
		}
	}
	return &fieldError{fmt.Sprintf("Unknown field %s.", name)}
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func derefType(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// hasLoneSurrogate reports whether a JSON text escapes half of a UTF-16
// surrogate pair (\ud800 without its low half, or a low half alone), which
// encoding/json would decode to U+FFFD.
func hasLoneSurrogate(raw []byte) bool {
	surrogate := func(at int) (rune, bool) { // the \uXXXX at raw[at:]
		if at+6 > len(raw) || raw[at] != '\\' || raw[at+1] != 'u' {
			return 0, false
		}
		n, err := strconv.ParseUint(string(raw[at+2:at+6]), 16, 16)
		return rune(n), err == nil
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		r, ok := surrogate(i)
		switch {
		case !ok:
			i++ // another escape, such as \\ or \"
		case utf16.IsSurrogate(r) && r < 0xdc00:
			if low, ok := surrogate(i + 6); !ok || low < 0xdc00 || low > 0xdfff {
				return true
			}
			i += 11
		case utf16.IsSurrogate(r):
			return true
		default:
			i += 5
		}
	}
	return false
}

// bodyError turns an error of reading or decoding a body into a user error.
// t is the type decoded into, whose range tags name the range of an integer
// field that a number does not fit.
func bodyError(err error, t reflect.Type) error {
	var (
		tooLarge  *http.MaxBytesError
		syntax    *json.SyntaxError
		typeError *json.UnmarshalTypeError
		netErr    net.Error
		field     *fieldError
	)
	switch {
	case errors.As(err, &tooLarge):
		return tally.Errorf(tally.ECodePayloadTooLarge, "The body must be at most %d bytes.", MaxBodyBytes)
	case errors.As(err, &netErr) && netErr.Timeout():
		// The server's read timeout: a client that sends its body too slowly.
		return tally.Errorf(tally.ECodeRequestTimeout, "The body did not arrive in time; send it in one go.")
	case errors.As(err, &field):
		return tally.Errorf(tally.ECodeValidation, "%s", field.msg)
	case errors.Is(err, io.EOF):
		return tally.Errorf(tally.ECodeInvalidJSON, "The body is empty; send a JSON object.")
	case errors.As(err, &syntax), errors.Is(err, io.ErrUnexpectedEOF):
		return tally.Errorf(tally.ECodeInvalidJSON, "The body is not valid JSON: %v.", err)
	case errors.As(err, &typeError):
		if typeError.Field == "" {
			return tally.Errorf(tally.ECodeValidation, "The body must be a JSON object.")
		}
		if f, ok := fields.Lookup(t, typeError.Field); ok && f.HasRange && strings.HasPrefix(typeError.Value, "number") {
			return tally.Errorf(tally.ECodeValidation, "%s", f.RangeMessage(typeError.Field))
		}
		return tally.Errorf(tally.ECodeValidation, "%s must be %s.", typeError.Field, jsonType(typeError.Type.Kind().String()))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.TrimPrefix(err.Error(), "json: unknown field ")
		return tally.Errorf(tally.ECodeValidation, "Unknown field %s.", field)
	}
	return tally.Errorf(tally.ECodeInvalidJSON, "The body could not be read: %v.", err)
}

// jsonType names a Go kind the way a JSON user thinks of it.
func jsonType(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"):
		return "an integer"
	case kind == "string":
		return "a string"
	case kind == "bool":
		return "a boolean"
	case kind == "slice":
		return "an array"
	case kind == "struct", kind == "map", kind == "ptr":
		return "an object"
	}
	return fmt.Sprintf("of type %s", kind)
}

// logger returns the request's logger, which carries the request id.
func logger(ctx interface{ Value(any) any }) *slog.Logger {
	if info, ok := ctx.Value(infoKey{}).(*requestInfo); ok {
		return info.logger()
	}
	return slog.Default()
}
