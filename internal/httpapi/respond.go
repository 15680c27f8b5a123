package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"

	"github.com/tally-hq/tally"
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
	tally.ECodeUnsupportedMediaType: http.StatusUnsupportedMediaType,
	tally.ECodeConflict:             http.StatusConflict,
	tally.ECodeInvalidTransition:    http.StatusConflict,
	tally.ECodeInternal:             http.StatusInternalServerError,
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

// writeError answers with the error shape and logs errors not meant for users.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	if tally.ErrorCode(err) == tally.ECodeInternal {
		logger(r.Context()).Error("internal error", "err", err.Error())
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
// MaxBodyBytes, no unknown fields, values of the right types, nothing after
// the object.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return tally.Errorf(tally.ECodeUnsupportedMediaType, "Send the body as JSON with 'Content-Type: application/json'.")
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bodyError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return bodyError(err)
		}
		return tally.Errorf(tally.ECodeInvalidJSON, "The body must hold one JSON object and nothing after it.")
	}
	return nil
}

func bodyError(err error) error {
	var (
		tooLarge  *http.MaxBytesError
		syntax    *json.SyntaxError
		typeError *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &tooLarge):
		return tally.Errorf(tally.ECodePayloadTooLarge, "The body must be at most %d bytes.", MaxBodyBytes)
	case errors.Is(err, io.EOF):
		return tally.Errorf(tally.ECodeInvalidJSON, "The body is empty; send a JSON object.")
	case errors.As(err, &syntax), errors.Is(err, io.ErrUnexpectedEOF):
		return tally.Errorf(tally.ECodeInvalidJSON, "The body is not valid JSON: %v.", err)
	case errors.As(err, &typeError):
		if typeError.Field == "" {
			return tally.Errorf(tally.ECodeValidation, "The body must be a JSON object.")
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
	if l, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok {
		return l
	}
	return slog.Default()
}

type loggerKey struct{}
