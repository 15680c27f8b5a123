// Package deploy reads Tally's AWS SAM template (template.yaml at the
// repository root) into typed values, without SAM CLI: Load parses it with
// CloudFormation's short-form tags (!Ref, !GetAtt, !Sub, …) and long forms
// ({"Ref": …}, {"Fn::GetAtt": […]}) alike into Intrinsic values, and the
// accessors return the functions (with SAM's Globals applied), their events
// and routes, the table, queues, state machine and alarms.
//
// Its test checks the template against docs/aws.md and against the code
// itself (the folders in functions/, the routes internal/httpapi serves, the
// table internal/store/dynamo creates, the Makefile's build targets). The CDK
// app's parity test can load both template.yaml and its synthesized JSON with
// Load (YAML is a superset of JSON) and compare them.
package deploy
