// Command hello is an aws-lambda-go hello world: the floor the functions'
// init time is measured against (internal/lambdacheck).
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"
)

func main() {
	lambda.Start(func(context.Context) (string, error) { return "hello", nil })
}
