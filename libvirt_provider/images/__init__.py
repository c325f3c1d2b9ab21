"""Images on a host: importing them into a pool, the per-host cache, its status and its collection.

Pure rules (`names`, `status`, `gc`, `digest`) sit beside the two shells that drive libvirt
(`importer`, which downloads and verifies, and `cache`, the thread that writes this host's
entries into LibvirtImage status and deletes unused bases).
"""
