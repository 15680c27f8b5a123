package tally

import (
	"errors"
	"fmt"
)

// Error codes, as they appear in the API's error body.
const (
	ECodeUnauthorized         = "unauthorized"
	ECodeNotFound             = "not_found"
	ECodeMethodNotAllowed     = "method_not_allowed"
	ECodeValidation           = "validation_error"
	ECodeRateLimited          = "rate_limit_exceeded"
	ECodeInvalidJSON          = "invalid_json"
	ECodePayloadTooLarge      = "payload_too_large"
	ECodeHeadersTooLarge      = "headers_too_large"
	ECodeRequestTimeout       = "request_timeout"
	ECodeUnsupportedMediaType = "unsupported_media_type"
	ECodeConflict             = "conflict"
	ECodeInvalidTransition    = "invalid_transition"
	ECodeCapReached           = "cap_reached"
	ECodeInternal             = "internal_error"
	ECodeUnavailable          = "unavailable"
)

// Error is an error meant for the API's user: Code is machine-readable,
// Message says what is wrong in words. Any other error is internal and is
// never shown.
type Error struct {
	Code    string
	Message string
	// Field names the input field a validation error is about, when it is
	// about one (so a form can show the message beside it); not part of the
	// API's answer, whose message names the field in words.
	Field string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf returns an *Error with a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of a user-facing error, or ECodeInternal.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ECodeInternal
}

// ErrorMessage returns the message of a user-facing error, or a generic one
// that leaks nothing about internals.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "An internal error occurred."
}

// ErrorField returns the input field a user-facing error is about, or "".
func ErrorField(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Field
	}
	return ""
}
