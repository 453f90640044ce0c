package release

import (
	"fmt"
	"time"
)

// Config is how a Releaser works; the zero value takes the defaults.
type Config struct {
	// DeregisterTimeout is how long agents have to deregister before their instances are
	// terminated instead of offered (default 2m).
	DeregisterTimeout time.Duration // deregister-timeout
	// PollInterval caps the wait between reads of the items (default 200ms; see state.Store.Poll).
	PollInterval time.Duration
}

// Defaults.
const (
	DefaultDeregisterTimeout = 2 * time.Minute
	DefaultPollInterval      = 200 * time.Millisecond
	maxDeregisterTimeout     = time.Hour
)

// Validate applies the defaults to unset fields and refuses values out of range, naming the
// input. It makes no request.
func (c *Config) Validate() error {
	if c.DeregisterTimeout == 0 {
		c.DeregisterTimeout = DefaultDeregisterTimeout
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.DeregisterTimeout < time.Second || c.DeregisterTimeout > maxDeregisterTimeout {
		return fmt.Errorf("deregister-timeout: %s: want 1s to %s", c.DeregisterTimeout, maxDeregisterTimeout)
	}
	if c.PollInterval < 10*time.Millisecond {
		return fmt.Errorf("poll interval: %s: want 10ms or more", c.PollInterval)
	}
	return nil
}
