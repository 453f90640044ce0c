package emustack

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// assetManifest is the part of <artifact>.assets.json an upload needs.
type assetManifest struct {
	Files map[string]struct {
		Source struct {
			Path      string `json:"path"`
			Packaging string `json:"packaging"`
		} `json:"source"`
		Destinations map[string]struct {
			BucketName string `json:"bucketName"`
			ObjectKey  string `json:"objectKey"`
		} `json:"destinations"`
	} `json:"files"`
}

// readManifest reads the artifact's asset manifest.
func readManifest(dir, artifact string) (*assetManifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, artifact+".assets.json"))
	if err != nil {
		return nil, fmt.Errorf("read the asset manifest: %w", err)
	}
	var m assetManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("parse the asset manifest: %w", err)
	}
	return &m, nil
}

// uploadAssets uploads the stack's file assets (not its template, which CreateStack takes
// inline) to the buckets the manifest names, its placeholders resolved as the CDK CLI does.
func uploadAssets(ctx context.Context, client *s3.Client, dir string, m *assetManifest, env environment) error {
	for id, f := range m.Files {
		if strings.HasSuffix(f.Source.Path, ".template.json") {
			continue
		}
		body, err := pack(filepath.Join(dir, f.Source.Path), f.Source.Packaging)
		if err != nil {
			return fmt.Errorf("pack asset %s: %w", id, err)
		}
		for _, d := range f.Destinations {
			bucket := env.resolve(d.BucketName)
			if _, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(env.resolve(d.ObjectKey)),
				Body: bytes.NewReader(body)}); err != nil {
				return fmt.Errorf("upload asset %s to s3://%s: %w", id, bucket, err)
			}
		}
	}
	return nil
}

// pack returns an asset's upload: the file, or a directory zipped.
func pack(path, packaging string) ([]byte, error) {
	if packaging != "zip" {
		return os.ReadFile(path)
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	err := filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(path, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h, err := zip.FileInfoHeader(info)
		if err != nil {
			return err
		}
		h.Name, h.Method = rel, zip.Deflate
		w, err := zw.CreateHeader(h)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
