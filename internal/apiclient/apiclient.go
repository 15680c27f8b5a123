// Package apiclient is a Go client of Tally's API generated from
// docs/openapi.yaml by oapi-codegen (pinned in go.mod as a tool), with its
// default settings: what a customer generating a client gets. It is not
// used by Tally itself; its tests keep the document fit for generators (the
// client is regenerated and must equal this one, compile, and decode real
// answers, errors included).
package apiclient

//go:generate go tool oapi-codegen -config oapi-codegen.yaml ../../docs/openapi.yaml
