// Command infra is Tally's CDK app: one stack, TallyStack, with the AWS
// layout of docs/aws.md (the same one template.yaml describes for SAM).
//
//	make build                  # bin/<function>/bootstrap, linux/arm64
//	cd infra && cdk synth       # or: go run .  (writes cdk.out/)
//	cd infra && cdk deploy
//
// Context (-c key=value): repoRoot (default ..), binDir (default
// <repoRoot>/bin), placeholderCode=true to synthesize without binaries (the
// template is then not deployable; TALLY_CDK_PLACEHOLDER_CODE=1 does the
// same), RateLimit, ApplicationRateLimit and DeliverMaxConcurrency (the
// parameters' defaults).
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
)

func main() {
	defer jsii.Close()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "infra:", err)
		os.Exit(1)
	}
}

func run() error {
	var appProps *awscdk.AppProps
	if os.Getenv("CDK_OUTDIR") == "" { // not run by the cdk CLI: go run .
		appProps = &awscdk.AppProps{Outdir: jsii.String("cdk.out")}
	}
	app := awscdk.NewApp(appProps)
	props := &TallyStackProps{RepoRoot: contextString(app, "repoRoot", "..")}
	props.BinDir = contextString(app, "binDir", "")
	var err error
	if props.RateLimit, err = contextNumber(app, "RateLimit"); err != nil {
		return err
	}
	if props.ApplicationRateLimit, err = contextNumber(app, "ApplicationRateLimit"); err != nil {
		return err
	}
	if props.DeliverMaxConcurrency, err = contextNumber(app, "DeliverMaxConcurrency"); err != nil {
		return err
	}
	if contextString(app, "placeholderCode", "") == "true" || os.Getenv("TALLY_CDK_PLACEHOLDER_CODE") == "1" {
		dir, err := os.MkdirTemp("", "tally-placeholder-code")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if err := WritePlaceholderCode(dir); err != nil {
			return err
		}
		props.PlaceholderCode = dir
	}
	if props.RepoRoot, err = filepath.Abs(props.RepoRoot); err != nil {
		return err
	}
	if _, err := NewTallyStack(app, "TallyStack", props); err != nil {
		return err
	}
	app.Synth(nil)
	return nil
}

func contextString(app awscdk.App, key, def string) string {
	switch v := app.Node().TryGetContext(jsii.String(key)).(type) {
	case string:
		return v
	case bool:
		return strconv.FormatBool(v)
	}
	return def
}

func contextNumber(app awscdk.App, key string) (float64, error) {
	switch v := app.Node().TryGetContext(jsii.String(key)).(type) {
	case nil:
		return 0, nil
	case float64:
		if v < 1 {
			return 0, fmt.Errorf("context %s=%v: want a number ≥ 1", key, v)
		}
		return v, nil
	case string:
		n, err := strconv.ParseFloat(v, 64)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("context %s=%q: want a number ≥ 1", key, v)
		}
		return n, nil
	default:
		return 0, fmt.Errorf("context %s=%v: want a number", key, v)
	}
}
