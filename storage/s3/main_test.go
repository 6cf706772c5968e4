package s3

import (
	"testing"

	"github.com/graftworks/graft/internal/testenv"
)

// TestMain stops the S3 servers the tests start, pass or fail.
func TestMain(m *testing.M) { testenv.Main(m) }
