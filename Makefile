# Tally: `make run` serves locally on 127.0.0.1:8080 with the embedded store in ./.tally;
# `make test` runs every test (it fetches and starts DynamoDB Local itself).
GO ?= go
FUNCTIONS := $(notdir $(wildcard functions/*))

.PHONY: run test build clean dynamodb-local

run:
	$(GO) run ./cmd/tally serve

test:
	./scripts/test.sh

dynamodb-local:
	./scripts/dynamodb-local.sh fetch

# One arm64 bootstrap per Lambda function, as provided.al2023 expects.
build: $(FUNCTIONS:%=bin/%/bootstrap)

bin/%/bootstrap: FORCE
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -tags lambda.norpc -trimpath -ldflags='-s -w' -o $@ ./functions/$*

clean:
	rm -rf bin

.PHONY: FORCE
FORCE:
