# Tally: `make run` serves locally on 127.0.0.1:8080 with the embedded store in ./.tally;
# `make test` runs every test (it fetches and starts DynamoDB Local itself).
GO ?= go
FUNCTIONS := $(notdir $(wildcard functions/*))

# One Lambda bootstrap: linux/arm64, static, as provided.al2023 expects.
LAMBDA_BUILD = CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -tags lambda.norpc -trimpath -ldflags='-s -w'

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

clean:
	rm -rf bin .aws-sam

.PHONY: FORCE
FORCE:
