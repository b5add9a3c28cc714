"""verif"""
