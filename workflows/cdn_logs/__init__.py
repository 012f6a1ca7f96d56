"""The CDN-log example workflow of shared/seeds/004 (workflows/cdn_logs.xml)."""
