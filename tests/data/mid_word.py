class Account:
    def __init__(self, user_name, balance=0):
        self.user_name = user_name
        self.balance = balance

    def describe(self):
        return f"{self.user_na
