package doctor

import (
	"context"
	"testing"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/stretchr/testify/require"
)

// TestQuotaOf: each family counts against its own vCPU quota, by market; one the check does not
// know is said so, not guessed.
func TestQuotaOf(t *testing.T) {
	for _, tc := range []struct {
		typ  string
		spot bool
		code string
	}{
		{"c7i.large", false, "L-1216C47A"}, {"m7g.xlarge", true, "L-34B43A08"}, {"t3.micro", false, "L-1216C47A"},
		{"g5.xlarge", false, "L-DB2E81BA"}, {"vt1.3xlarge", true, "L-3819A6DF"}, {"p4d.24xlarge", false, "L-417A185B"},
		{"inf2.xlarge", false, "L-1945791B"}, {"x2idn.16xlarge", true, "L-E3A00192"}, {"i4i.large", false, "L-1216C47A"},
	} {
		q, ok := quotaOf(tc.typ, tc.spot)
		require.True(t, ok, tc.typ)
		require.Equal(t, tc.code, q.code, tc.typ)
	}
	for _, typ := range []string{"trn1.2xlarge", "dl1.24xlarge", "hpc7g.4xlarge", "mac2.metal"} {
		_, ok := quotaOf(typ, false)
		require.False(t, ok, typ)
	}
}

// TestNewer: runner versions compare by number, not as text.
func TestNewer(t *testing.T) {
	require.True(t, newer("2.330.0", "2.321.0"))
	require.True(t, newer("2.321.10", "2.321.9"))
	require.False(t, newer("2.321.0", "2.321.0"))
	require.False(t, newer("2.99.0", "2.321.0"))
}

// TestPoolsFromTemplate: the pool documents a synthesized template will publish are read with
// what only a deploy knows left empty.
func TestPoolsFromTemplate(t *testing.T) {
	tpl, err := ParseTemplate([]byte(`{"Resources": {
		"Doc": {"Type": "AWS::SSM::Parameter", "Properties": {"Name": "/hangar/prod/pools/linux",
			"Value": {"Fn::Join": ["", ["{\"name\":\"linux\",\"account\":\"", {"Ref": "AWS::AccountId"}, "\",\"instanceTypes\":[\"c7i.large\"],\"maxInstances\":20}"]]}}},
		"Other": {"Type": "AWS::SSM::Parameter", "Properties": {"Name": "/elsewhere", "Value": "x"}}}}`))
	require.NoError(t, err)
	s, err := PoolsFromTemplate("prod", tpl)
	require.NoError(t, err)
	require.Len(t, s.Pools, 1)
	require.Equal(t, "linux", s.Pools[0].Name)
	require.Equal(t, "", s.Pools[0].Account)
	require.Equal(t, []string{"c7i.large"}, s.Pools[0].InstanceTypes)
	require.Equal(t, 20, s.Pools[0].MaxInstances)
	_, err = PoolsFromTemplate("other", tpl)
	require.ErrorContains(t, err, "/hangar/other/pools/")
	_, err = ParseTemplate([]byte(`{"a": 1}`))
	require.ErrorContains(t, err, "no Resources")
}

// TestImageContract: a pool whose current spec failed the image contract is a failure naming
// what is missing; one marked for an older spec (a deploy fixed it) is not.
func TestImageContract(t *testing.T) {
	at := time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)
	marks := map[string]*state.BrokenSpec{
		"linux": {Spec: "abc", Reason: "hangar-agent: the image lacks what Hangar needs: git: …", At: at},
		"arm":   {Spec: "old", Reason: "…", At: at},
	}
	d := Deps{Stack: &pooldoc.Stack{Pools: []*pooldoc.Document{{Name: "linux", SpecHash: "abc"}, {Name: "arm", SpecHash: "new"}}},
		Broken: func(_ context.Context, pool string) (*state.BrokenSpec, error) { return marks[pool], nil }}
	fs := imageContract(context.Background(), d)
	require.Len(t, fs, 2)
	require.Equal(t, Fail, fs[0].Status)
	require.Contains(t, fs[0].Detail, "git: …")
	require.Contains(t, fs[0].Fix, "deploy")
	require.Equal(t, OK, fs[1].Status)
}
