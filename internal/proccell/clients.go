package proccell

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/client/operator"
	"github.com/lockcell/lockcell/internal/certs"
	"github.com/lockcell/lockcell/internal/clientfile"
)

// CAPool returns the pool of the cell CA, which replica certificates chain
// to.
func (c *Cell) CAPool() (*x509.CertPool, error) {
	if c.ca == nil {
		return nil, fmt.Errorf("%w: an attached cell has no CA", ErrInvalidConfig)
	}
	return c.ca.Pool(), nil
}

// Issue issues a client certificate for principal of tenant from the cell
// CA (the tenant need not exist yet; CreateTenant makes it).
func (c *Cell) Issue(tenant, principal string) (tls.Certificate, error) {
	if c.ca == nil {
		return tls.Certificate{}, fmt.Errorf("%w: an attached cell has no CA", ErrInvalidConfig)
	}
	return c.ca.IssueClient(certs.ClientID{Tenant: tenant, Principal: principal}, certs.Options{})
}

// adminFile is the administrator's client settings `lockcelld init` wrote.
func (c *Cell) adminFile() string { return filepath.Join(c.cfg.Dir, "admin.json") }

// PublicKey returns the cell's sequencer-signing key.
func (c *Cell) PublicKey() (ed25519.PublicKey, error) {
	f, err := client.ReadConfigFile(c.adminFile())
	if err != nil {
		return nil, err
	}
	return f.SigningKey()
}

// AdminConfig returns the client config of the cell administrator, with
// Config.Logger and a reconnect backoff of at most 300 ms.
func (c *Cell) AdminConfig() (client.Config, error) {
	f, err := client.ReadConfigFile(c.adminFile())
	if err != nil {
		return client.Config{}, err
	}
	cfg, err := f.Config(true)
	if err != nil {
		return client.Config{}, err
	}
	cfg.Logger = c.log
	cfg.ReconnectMax = 300 * time.Millisecond
	return cfg, nil
}

// ClientConfig returns a client config for principal of tenant, with a
// certificate issued now (as AdminConfig, but not the administrator).
func (c *Cell) ClientConfig(tenant, principal string) (client.Config, error) {
	cfg, err := c.AdminConfig()
	if err != nil {
		return client.Config{}, err
	}
	cert, err := c.Issue(tenant, principal)
	if err != nil {
		return client.Config{}, err
	}
	cfg.Certificate = &cert
	return cfg, nil
}

// WriteClientFile issues a certificate for principal of tenant, writes it
// to certs/<tenant>-<principal>*.pem and returns the path of a client
// settings file (client.LoadConfigFile) that uses it.
func (c *Cell) WriteClientFile(tenant, principal string) (string, error) {
	cert, err := c.Issue(tenant, principal)
	if err != nil {
		return "", err
	}
	certPEM, keyPEM, err := certs.EncodeKeyPair(cert)
	if err != nil {
		return "", err
	}
	base := "certs/" + tenant + "-" + principal
	err1 := os.WriteFile(filepath.Join(c.cfg.Dir, base+".pem"), certPEM, 0o600)
	err2 := os.WriteFile(filepath.Join(c.cfg.Dir, base+"-key.pem"), keyPEM, 0o600)
	if err := errors.Join(err1, err2); err != nil {
		return "", err
	}
	cf := clientfile.File{Cell: c.cfg.Name, Addrs: c.Addrs(), CA: "certs/ca.pem", PublicKey: "certs/signing-pub.pem",
		User: clientfile.Credential{Cert: base + ".pem", Key: base + "-key.pem"}}
	file := filepath.Join(c.cfg.Dir, tenant+"-"+principal+"-client.json")
	return file, os.WriteFile(file, cf.Marshal(), 0o600)
}

// AdminClient dials the cell as its administrator.
func (c *Cell) AdminClient(ctx context.Context) (*client.Client, error) {
	cfg, err := c.AdminConfig()
	if err != nil {
		return nil, err
	}
	return client.Dial(ctx, cfg)
}

// CreateTenant creates tenant (with no quota and default ACLs), retrying
// while the cell elects a master; a tenant that exists already is fine.
func (c *Cell) CreateTenant(ctx context.Context, tenant string) error {
	admin, err := c.AdminClient(ctx)
	if err != nil {
		return fmt.Errorf("proccell: creating tenant %q: %w", tenant, err)
	}
	defer admin.Close()
	for {
		_, err := operator.New(admin).CreateTenant(ctx, tenant, api.TenantQuota{}, api.ACLNames{})
		if err == nil || errors.Is(err, api.ErrAlreadyExists) {
			return nil
		}
		if !sleep(ctx, 100*time.Millisecond) {
			return fmt.Errorf("proccell: creating tenant %q: %w", tenant, err)
		}
	}
}
