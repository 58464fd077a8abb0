// Package clientfile is the one schema of a client settings file
// (client.json, admin.json, a tenant's file): the file that tells a client
// how to reach a cell and which credentials to use. The cell's tools write
// it (cell.StartLocal, lockcelld init and dev) and package client reads it
// (client.ReadConfigFile), so both sides share this type rather than two
// copies kept in step.
//
// The current layout is version 2: the cell's addresses, CA and signing
// key, then the user's and the administrator's credentials as two objects:
//
//	{
//	  "version": 2,
//	  "cell": "dev",
//	  "addrs": ["127.0.0.1:7001"],
//	  "ca": "certs/ca.pem",
//	  "public_key": "certs/signing-pub.pem",
//	  "user": {"cert": "certs/t.pem", "key": "certs/t-key.pem"},
//	  "admin": {"cert": "certs/admin.pem", "key": "certs/admin-key.pem"}
//	}
//
// Version 1 files (no "version" field; the credentials flat, as "cert",
// "key", "token_file", "admin_cert", "admin_key") still load: Parse
// migrates them to the current layout, and Marshal writes only that.
// Paths in a file are relative to the file's directory unless absolute;
// resolving them is the reader's business.
package clientfile

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Version is the layout Marshal writes.
const Version = 2

// ErrInvalid is returned (wrapped) by Parse for a file that is not a
// settings file of a known layout; the message names the problem.
var ErrInvalid = errors.New("clientfile: invalid settings file")

// File is a client settings file.
type File struct {
	// Version is the layout the file was written in; Parse returns
	// Version for a file it migrated, and Marshal always writes it.
	Version int `json:"version"`
	// Cell names the cell (informational).
	Cell string `json:"cell,omitempty"`
	// Addrs are the replicas' addresses ("host:port"). Required.
	Addrs []string `json:"addrs"`
	// CA is the PEM file of the cell CA. Required.
	CA string `json:"ca"`
	// PublicKey is the PEM file of the cell's sequencer-signing public key.
	PublicKey string `json:"public_key,omitempty"`
	// User is the credential of the file's user (a tenant principal).
	User Credential `json:"user,omitzero"`
	// Admin is the cell administrator's credential.
	Admin Credential `json:"admin,omitzero"`
}

// Credential names a principal's credential: a certificate and its key
// (PEM files), or a file holding a tenant token (lockctl tenant token
// writes one), used only when Cert is empty.
type Credential struct {
	Cert      string `json:"cert,omitempty"`
	Key       string `json:"key,omitempty"`
	TokenFile string `json:"token_file,omitempty"`
}

// v1 holds the flat credential fields of a version 1 file.
type v1 struct {
	Cert      string `json:"cert"`
	Key       string `json:"key"`
	TokenFile string `json:"token_file"`
	AdminCert string `json:"admin_cert"`
	AdminKey  string `json:"admin_key"`
}

// Parse decodes a settings file of any known layout and returns it in the
// current one. It returns an error wrapping ErrInvalid for malformed JSON,
// an unknown version, a file that mixes the layouts, or one without
// "addrs" or "ca".
func Parse(b []byte) (File, error) {
	var disk struct {
		File
		v1
	}
	if err := json.Unmarshal(b, &disk); err != nil {
		return File{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	f, old := disk.File, disk.v1
	switch f.Version {
	case 0:
		if f.User != (Credential{}) || f.Admin != (Credential{}) {
			return File{}, fmt.Errorf("%w: \"user\" or \"admin\" in a file without \"version\" (write \"version\": %d)", ErrInvalid, Version)
		}
		f.User = Credential{Cert: old.Cert, Key: old.Key, TokenFile: old.TokenFile}
		f.Admin = Credential{Cert: old.AdminCert, Key: old.AdminKey}
		f.Version = Version
	case Version:
		if old != (v1{}) {
			return File{}, fmt.Errorf("%w: a version %d file has version 1's flat credential fields (cert, key, token_file, admin_cert, admin_key); put them under \"user\" and \"admin\"", ErrInvalid, Version)
		}
	default:
		return File{}, fmt.Errorf("%w: version %d is not one this build reads (1 or %d)", ErrInvalid, f.Version, Version)
	}
	if len(f.Addrs) == 0 || f.CA == "" {
		return File{}, fmt.Errorf("%w: needs \"addrs\" and \"ca\"", ErrInvalid)
	}
	return f, nil
}

// Marshal encodes f in the current layout (Version is set whatever f
// says), indented, with a final newline.
func (f File) Marshal() []byte {
	f.Version = Version
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		// INVARIANT: File holds only strings and a slice of strings.
		panic("clientfile: encoding a File: " + err.Error())
	}
	return append(b, '\n')
}
