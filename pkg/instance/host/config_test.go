package host

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func validConfig() Config {
	c := Config{RunAs: "runner"}
	c.ApplyDefaults()
	return c
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	c := validConfig()
	require.NoError(t, c.Validate())
	require.Equal(t, []string{"/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue", "/var/crash"}, c.TmpDirs)
	require.Equal(t, DefaultMetadataEndpoint, c.MetadataEndpoint)

	tests := []struct {
		name string
		mut  func(*Config)
		want string
	}{
		{"tmp root", func(c *Config) { c.TmpDirs = []string{"/"} }, `tmp dir "/"`},
		{"relative cgroup root", func(c *Config) { c.CgroupRoot = "jobs" }, `cgroup root "jobs"`},
		{"relative helper", func(c *Config) { c.Helper = "hangar-runas" }, `helper "hangar-runas": want the absolute path`},
		{"run as self", func(c *Config) { c.RunAs = "self" }, `run-as "self": want the unprivileged user`},
		{"run as nobody given", func(c *Config) { c.RunAs = "" }, `run-as "": want the unprivileged user`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := validConfig()
			tc.mut(&c)
			require.ErrorContains(t, c.Validate(), tc.want)
			_, err := New(c, nil)
			require.ErrorContains(t, err, tc.want, "New refuses it too")
		})
	}
}

func TestRefuseRootGroups(t *testing.T) {
	t.Parallel()
	tests := []struct {
		groups  []string
		sudo    bool
		refused string
	}{
		{[]string{"runner", "users"}, false, ""},
		{[]string{"runner", "docker"}, false, "group docker"},
		{[]string{"wheel"}, false, "group wheel"},
		{[]string{"sudo", "adm"}, false, "group sudo"},
		{[]string{"runner", "docker", "sudo"}, true, ""}, // declared by the pool
	}
	for _, tc := range tests {
		err := refuseRootGroups("runner", tc.groups, tc.sudo)
		if tc.refused == "" {
			require.NoError(t, err, "%v", tc.groups)
			continue
		}
		require.ErrorContains(t, err, tc.refused)
		require.ErrorContains(t, err, "runner.sudo")
	}
}

// TestNotReadyBeforeInit: nothing of a run is started or scrubbed on a host Init has not readied.
func TestNotReadyBeforeInit(t *testing.T) {
	t.Parallel()
	h, err := New(validConfig(), nil)
	require.NoError(t, err)
	_, err = h.OpenRun(t.TempDir())
	require.ErrorIs(t, err, errNotReady)
	require.ErrorIs(t, h.Scrub(t.Context()), errNotReady)
}
