package endpoints_test

import (
	"testing"

	"github.com/tally-hq/tally/internal/dynamotest"
)

func TestMain(m *testing.M) { dynamotest.Main(m) }
