"""primus_ext.launcher"""
