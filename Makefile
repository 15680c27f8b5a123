# Tally: `make run` serves locally on 127.0.0.1:8080 with the embedded store in ./.tally and
# Prometheus metrics on 127.0.0.1:9464 (ADDR=, DATA=, METRICS= and ARGS= change that; METRICS=
# turns them off);
# `make test` runs every test (it fetches and starts DynamoDB Local itself).
GO ?= go
FUNCTIONS := $(notdir $(wildcard functions/*))

# One Lambda bootstrap: linux/arm64, static, as provided.al2023 expects;
# without net/rpc (aws-lambda-go) and HTTP/2 (net/http: Lambda, DynamoDB,
# SQS, Step Functions and webhook receivers all speak HTTP/1.1), stripped.
# internal/lambdacheck builds and lists (go list -deps) the same way
# (BuildFlags, BuildTags).
LAMBDA_BUILD = CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -tags lambda.norpc,nethttpomithttp2 -trimpath -ldflags='-s -w'

.PHONY: run test build clean dynamodb-local lambda-check

# make run [ADDR=host:port] [DATA=folder] [METRICS=host:port] [ARGS="more tally serve flags"];
# TALLY_* settings pass through the environment (TALLY_RATE_LIMIT=500 make run).
METRICS ?= 127.0.0.1:9464
run:
	$(GO) run ./cmd/tally serve $(if $(ADDR),--addr $(ADDR)) $(if $(DATA),--data $(DATA)) $(if $(METRICS),--metrics $(METRICS)) $(ARGS)

test:
	./scripts/test.sh

dynamodb-local:
	./scripts/dynamodb-local.sh fetch

# One arm64 bootstrap per Lambda function, as provided.al2023 expects.
build: $(FUNCTIONS:%=bin/%/bootstrap)

bin/%/bootstrap: FORCE
	$(LAMBDA_BUILD) -o $@ ./functions/$*

# `sam build` (template.yaml, BuildMethod: makefile) runs `make build-<LogicalId>`
# with ARTIFACTS_DIR set: build-OffersFunction builds functions/offers into
# $(ARTIFACTS_DIR)/bootstrap. The logical id is the folder's name, capitalized,
# followed by "Function"; the pattern rule lowercases the stem to find the folder.
lower = $(subst A,a,$(subst B,b,$(subst C,c,$(subst D,d,$(subst E,e,$(subst F,f,$(subst G,g,$(subst H,h,$(subst I,i,$(subst J,j,$(subst K,k,$(subst L,l,$(subst M,m,$(subst N,n,$(subst O,o,$(subst P,p,$(subst Q,q,$(subst R,r,$(subst S,s,$(subst T,t,$(subst U,u,$(subst V,v,$(subst W,w,$(subst X,x,$(subst Y,y,$(subst Z,z,$(1)))))))))))))))))))))))))))

build-%Function: FORCE
	$(if $(filter $(call lower,$*),$(FUNCTIONS)),,$(error no functions/$(call lower,$*) for $@))
	$(if $(ARTIFACTS_DIR),,$(error ARTIFACTS_DIR is not set: sam build sets it))
	$(LAMBDA_BUILD) -o "$(ARTIFACTS_DIR)/bootstrap" ./functions/$(call lower,$*)

# Bootstrap sizes, what each links, and init time next to an aws-lambda-go
# hello world (timing: not part of make test).
lambda-check:
	$(GO) run ./scripts/lambdacheck

clean:
	rm -rf bin .aws-sam

.PHONY: FORCE
FORCE:
