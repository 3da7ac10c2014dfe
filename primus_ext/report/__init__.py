"""primus_ext.report"""
