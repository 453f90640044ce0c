package names_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/names"
)

// TestVocabulary: each name is accepted in the forms its owner gives it and refused otherwise,
// with an error that names the bad value and the accepted form.
func TestVocabulary(t *testing.T) {
	t.Parallel()
	tests := []struct {
		what     string
		validate func(string) error
		ok       []string
		bad      map[string]string // value → what the error says
	}{
		{"stack", names.ValidateStack, []string{"hangar", "ci-2", strings.Repeat("s", 63)},
			map[string]string{"": "want the Hangar stack's name", "-ci": "starting with a letter or digit", "a_b": "letters, digits and '-'", strings.Repeat("s", 64): "1 to 63"}},
		{"pool", names.ValidatePool, []string{"linux", "linux-x64", "a"},
			map[string]string{"Linux": `pool name "Linux" is malformed`, "linux-": "not starting or ending with '-'", "a_b": "a-z, 0-9 and '-'"}},
		{"run id", names.ValidateRunID, []string{"1", "9876543210"},
			map[string]string{"": "run id is empty", "012": "no leading zero", "12a": "decimal digits", "j7": "github.run_id"}},
		{"assignment key", names.ValidateAssignmentKey, []string{"42", "j7", "j7r2"},
			map[string]string{"j0": "j<job id>", "x": "or a label-routed job's key"}},
		{"instance id", names.ValidateInstanceID, []string{"i-0123456789abcdef0", "i-01234567"},
			map[string]string{"i-XYZ": "lowercase hex digits", "0123456789": "want i- followed by"}},
		{"repository", names.ValidateRepository, []string{"octo/app", "Octo-Org/app.v2", "o/" + strings.Repeat("r", 100)},
			map[string]string{"octo": `repository "octo": want owner/name`, "-octo/app": "owner/name", "octo/a/b": "owner/name", "octo/" + strings.Repeat("r", 101): "owner/name"}},
		{"repository pattern", names.ValidateRepoPattern, []string{"octo/app", "octo/*"},
			map[string]string{"*/app": "want owner/name or owner/*", "octo": "want owner/name or owner/*"}},
		{"label", names.ValidateLabel, []string{"linux", "gpu.a10", "x_y-z", strings.Repeat("a", 64)},
			map[string]string{"": "want 1 to 64", "has space": "want 1 to 64", "a,b": "want 1 to 64", strings.Repeat("a", 65): "want 1 to 64",
				"ünï": "want 1 to 64", "12345": "could name another run"}},
		{"job label", names.ValidateJobLabel, []string{"hangar", "linux-x64"},
			map[string]string{"self-hosted": "every self-hosted runner carries it", "Self-Hosted": "want a label of your own", "1": "could name another run"}},
		{"runner group", names.ValidateRunnerGroup, []string{"hangar-ci", "CI runners"},
			map[string]string{"": "want an organisation runner group's name", " lead": "runner group's name", "a/b": "runner group's name"}},
		{"instance type pattern", names.ValidateTypePattern, []string{"c7i.large", "c*", "m7g.*", "t?.micro"},
			map[string]string{"C7I": "is malformed: want 1 to 64 of a-z", "c7i large": "with '*' and '?' as wildcards"}},
	}
	for _, tc := range tests {
		for _, v := range tc.ok {
			require.NoError(t, tc.validate(v), "%s %q", tc.what, v)
		}
		for v, want := range tc.bad {
			err := tc.validate(v)
			require.ErrorContains(t, err, want, "%s %q", tc.what, v)
			if v != "" {
				require.Contains(t, err.Error(), v, "%s: the error names the bad value", tc.what)
			}
		}
	}
}

func TestValidateTag(t *testing.T) {
	t.Parallel()
	tests := []struct{ key, value, want string }{
		{"team", "ci", ""},
		{"cost center/team:a@b", "x", ""},
		{"hangar:pool", "x", "reserved for Hangar"},
		{"HANGAR:run", "x", "reserved for Hangar"},
		{"aws:cloudformation", "x", `does not start with "aws:"`},
		{"", "x", "want a tag key"},
		{"bad*key", "x", "want a tag key"},
		{strings.Repeat("k", 129), "x", "want a tag key"},
		{"long", strings.Repeat("v", 257), "longer than 256"},
	}
	for _, tc := range tests {
		err := names.ValidateTag(tc.key, tc.value)
		if tc.want == "" {
			require.NoError(t, err, tc.key)
		} else {
			require.ErrorContains(t, err, tc.want, tc.key)
		}
	}
}

// TestJobKeys: a label-routed job's key never collides with a run id, and reads back.
func TestJobKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		job        int64
		redispatch int
		key        string
	}{{7, 0, "j7"}, {29871234567, 0, "j29871234567"}, {5, 3, "j5r3"}} {
		key := names.JobKey(tc.job, tc.redispatch)
		require.Equal(t, tc.key, key)
		job, n, ok := names.ParseJobKey(key)
		require.True(t, ok)
		require.Equal(t, tc.job, job)
		require.Equal(t, tc.redispatch, n)
		require.NoError(t, names.ValidateAssignmentKey(key))
		require.Error(t, names.ValidateRunID(key), "a job key is no run id")
	}
	for _, bad := range []string{"j", "j0", "j01", "jx", "j1r0", "j1r10", "j123456789012345678", "k1", "42x", ""} {
		_, _, ok := names.ParseJobKey(bad)
		require.False(t, ok, bad)
		require.False(t, names.IsJobKey(bad), bad)
	}
	require.Equal(t, "job 7 (j7)", names.Describe("j7"))
	require.Equal(t, "run 42", names.Describe("42"))
	require.Equal(t, "octo", names.Owner("octo/app"))
}
