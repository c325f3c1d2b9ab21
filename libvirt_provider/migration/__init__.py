"""A LibvirtMigration's pass: pure decisions (`phases`, `refusals`, `target_xml`, `progress`) and
the sequence that acts on them (`reconciler`, over `store` and the driver's migration calls)."""
