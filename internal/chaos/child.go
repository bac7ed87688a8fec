package chaos

import "os"

// EnvChild names the variable that, when set, makes the test binary run as a child client (see
// RunChild) instead of running tests.
const EnvChild = "LEASE_CHAOS_CHILD"

// IsChild reports whether this process was started as a child client.
func IsChild() bool { return os.Getenv(EnvChild) != "" }

// RunChild runs this process as a child client and returns its exit code.
func RunChild() int { return 0 }
