"""primus_ext.tune"""
