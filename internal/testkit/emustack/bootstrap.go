package emustack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
)

// bootstrapVersion is the version of CDK's bootstrap stack the stand-in claims to be.
const bootstrapVersion = "30"

// environment resolves the CDK CLI's placeholders in asset destinations.
type environment struct{ partition, account, region string }

func (e environment) resolve(s string) string {
	return strings.NewReplacer("${AWS::Partition}", e.partition, "${AWS::AccountId}", e.account, "${AWS::Region}", e.region).Replace(s)
}

// bootstrap stands in for `cdk bootstrap`: the buckets the asset manifest uploads to, and the
// bootstrap version parameter the template's BootstrapVersion parameter reads. Both are kept
// when they exist.
func bootstrap(ctx context.Context, cfg aws.Config, s3c *s3.Client, m *assetManifest, tpl []byte, env environment) error {
	buckets := map[string]bool{}
	for _, f := range m.Files {
		for _, d := range f.Destinations {
			buckets[env.resolve(d.BucketName)] = true
		}
	}
	for bucket := range buckets {
		_, err := s3c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
		var owned *s3types.BucketAlreadyOwnedByYou
		var exists *s3types.BucketAlreadyExists
		if err != nil && !errors.As(err, &owned) && !errors.As(err, &exists) {
			return fmt.Errorf("create assets bucket %s: %w", bucket, err)
		}
	}
	var t struct {
		Parameters map[string]struct {
			Type    string `json:"Type"`
			Default string `json:"Default"`
		} `json:"Parameters"`
	}
	if err := json.Unmarshal(tpl, &t); err != nil {
		return fmt.Errorf("parse the template: %w", err)
	}
	p, ok := t.Parameters["BootstrapVersion"]
	if !ok || p.Default == "" {
		return nil // a synthesizer without the bootstrap check
	}
	_, err := ssm.NewFromConfig(cfg).PutParameter(ctx, &ssm.PutParameterInput{Name: aws.String(p.Default), Value: aws.String(bootstrapVersion),
		Type: ssmtypes.ParameterTypeString})
	var dup *ssmtypes.ParameterAlreadyExists
	if err != nil && !errors.As(err, &dup) {
		return fmt.Errorf("put the bootstrap version parameter %s: %w", p.Default, err)
	}
	return nil
}
